// ReLU forward / backward on CUDA.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace pw::kernels::cuda {
namespace {

using detail::blocks_for;
using detail::kThreads;

// ---- kernels ------------------------------------------------------------------------------------

__global__ void relu_forward_kernel(const float* __restrict__ x, float* __restrict__ y, std::int64_t n) {
  PW_CUDA_KERNEL_LOOP(i, n) {
    const float v = x[i];
    y[i] = v > 0.0f ? v : 0.0f;
  }
}

__global__ void relu_backward_kernel(const float* __restrict__ y, const float* __restrict__ grad_y,
                                     float* __restrict__ grad_x, std::int64_t n) {
  PW_CUDA_KERNEL_LOOP(i, n) { grad_x[i] = y[i] > 0.0f ? grad_y[i] : 0.0f; }
}

}  // namespace

// ---- launchers ----------------------------------------------------------------------------------

Tensor relu_forward(const Tensor& x) {
  detail::require_f32(x, "relu_forward: x");
  const Device dev = x.device();
  CudaDeviceGuard guard(dev.index);
  Tensor y = Tensor::empty(x.shape(), DType::F32, dev);
  const std::int64_t n = x.numel();
  if (n == 0) return y;
  relu_forward_kernel<<<blocks_for(n), kThreads, 0, stream_of(dev)>>>(x.data<float>(), y.data<float>(), n);
  PW_CUDA_CHECK_LAUNCH();
  return y;
}

Tensor relu_backward(const Tensor& y, const Tensor& grad_y) {
  detail::require_f32(y, "relu_backward: y");
  detail::require_f32(grad_y, "relu_backward: grad_y");
  PW_CHECK(y.numel() == grad_y.numel(), "relu_backward: " << y.describe() << " vs " << grad_y.describe());
  const Device dev = y.device();
  CudaDeviceGuard guard(dev.index);
  Tensor grad_x = Tensor::empty(grad_y.shape(), DType::F32, dev);
  const std::int64_t n = y.numel();
  if (n == 0) return grad_x;
  relu_backward_kernel<<<blocks_for(n), kThreads, 0, stream_of(dev)>>>(y.data<float>(), grad_y.data<float>(),
                                                                       grad_x.data<float>(), n);
  PW_CUDA_CHECK_LAUNCH();
  return grad_x;
}

}  // namespace pw::kernels::cuda
