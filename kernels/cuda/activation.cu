// ReLU forward / backward on CUDA, for F32, BF16 and F16. The 16-bit kernels work on the bit
// patterns, as the CPU backend does: a pattern read as int16 is > 0 exactly when the value is
// positive (sign clear, not +0; NaN patterns with the sign clear pass through), so the result is
// exact and bit-identical to the CPU's.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/half.cuh"
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

__global__ void relu_forward_bits_kernel(const std::uint16_t* __restrict__ x, std::uint16_t* __restrict__ y,
                                         std::int64_t n) {
  PW_CUDA_KERNEL_LOOP(i, n) {
    const std::uint16_t v = x[i];
    y[i] = static_cast<std::int16_t>(v) > 0 ? v : std::uint16_t{0};
  }
}

__global__ void relu_backward_bits_kernel(const std::uint16_t* __restrict__ y, const std::uint16_t* __restrict__ grad_y,
                                          std::uint16_t* __restrict__ grad_x, std::int64_t n) {
  PW_CUDA_KERNEL_LOOP(i, n) { grad_x[i] = static_cast<std::int16_t>(y[i]) > 0 ? grad_y[i] : std::uint16_t{0}; }
}

bool is_16_bit(DType dtype) { return dtype == DType::BF16 || dtype == DType::F16; }

}  // namespace

// ---- launchers ----------------------------------------------------------------------------------

Tensor relu_forward(const Tensor& x) {
  detail::require_cuda_float(x, "relu_forward: x");
  const Device dev = x.device();
  CudaDeviceGuard guard(dev.index);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), dev);
  const std::int64_t n = x.numel();
  if (n == 0) return y;
  const cudaStream_t stream = stream_of(dev);
  if (is_16_bit(x.dtype())) {
    relu_forward_bits_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x.data<std::uint16_t>(),
                                                                      y.data<std::uint16_t>(), n);
  } else {
    relu_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x.data<float>(), y.data<float>(), n);
  }
  PW_CUDA_CHECK_LAUNCH();
  return y;
}

Tensor relu_backward(const Tensor& y, const Tensor& grad_y) {
  detail::require_cuda_float(y, "relu_backward: y");
  detail::require_cuda_float(grad_y, "relu_backward: grad_y");
  PW_CHECK(y.dtype() == grad_y.dtype(), "relu_backward: " << y.describe() << " and " << grad_y.describe()
                                                          << " differ in dtype");
  PW_CHECK(y.numel() == grad_y.numel(), "relu_backward: " << y.describe() << " vs " << grad_y.describe());
  const Device dev = y.device();
  CudaDeviceGuard guard(dev.index);
  Tensor grad_x = Tensor::empty(grad_y.shape(), grad_y.dtype(), dev);
  const std::int64_t n = y.numel();
  if (n == 0) return grad_x;
  const cudaStream_t stream = stream_of(dev);
  if (is_16_bit(y.dtype())) {
    relu_backward_bits_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
        y.data<std::uint16_t>(), grad_y.data<std::uint16_t>(), grad_x.data<std::uint16_t>(), n);
  } else {
    relu_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(y.data<float>(), grad_y.data<float>(),
                                                                 grad_x.data<float>(), n);
  }
  PW_CUDA_CHECK_LAUNCH();
  return grad_x;
}

}  // namespace pw::kernels::cuda
