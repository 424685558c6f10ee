// Inverted dropout on CUDA, for F32, BF16 and F16 (16-bit values scaled in float and rounded once).
// The keep rule and scale come from kernels/ops/dropout_mask.h, the counter-based hash the CPU
// backend also calls, so both draw bit-identical masks for a seed.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/ops/dropout_mask.h"

namespace pw::kernels::cuda {
namespace {

using detail::blocks_for;
using detail::kThreads;
using detail::load;
using detail::store;

// ---- kernels ------------------------------------------------------------------------------------

template <typename T>
__global__ void dropout_forward_kernel(const T* __restrict__ x, T* __restrict__ y, std::uint8_t* __restrict__ mask,
                                       std::int64_t n, double p, float scale, std::uint64_t seed) {
  PW_CUDA_KERNEL_LOOP(i, n) {
    const bool keep = dropout_keeps(seed, static_cast<std::uint64_t>(i), p);
    mask[i] = keep ? 1 : 0;
    y[i] = store<T>(keep ? load(x[i]) * scale : 0.0f);
  }
}

template <typename T>
__global__ void dropout_backward_kernel(const T* __restrict__ grad_y, const std::uint8_t* __restrict__ mask,
                                        T* __restrict__ grad_x, std::int64_t n, float scale) {
  PW_CUDA_KERNEL_LOOP(i, n) { grad_x[i] = store<T>(mask[i] != 0 ? load(grad_y[i]) * scale : 0.0f); }
}

// 1 / (1 - p) rounded to float, or 0 when p == 1 (nothing is kept), as the CPU backend.
float keep_scale(double p) { return static_cast<float>(dropout_scale(p)); }

}  // namespace

// ---- launchers ----------------------------------------------------------------------------------

DropoutResult dropout_forward(const Tensor& x, double p, std::uint64_t seed) {
  detail::require_cuda_float(x, "dropout_forward: x");
  PW_CHECK(p >= 0.0 && p <= 1.0, "dropout_forward: p must be in [0, 1], got " << p);
  const Device dev = x.device();
  CudaDeviceGuard guard(dev.index);
  DropoutResult r{Tensor::empty(x.shape(), x.dtype(), dev), Tensor::empty(x.shape(), DType::U8, dev)};
  const std::int64_t n = x.numel();
  if (n == 0) return r;
  detail::visit_cuda_float(x.dtype(), "dropout_forward", [&](auto tag) {
    using T = decltype(tag);
    dropout_forward_kernel<T><<<blocks_for(n), kThreads, 0, stream_of(dev)>>>(
        x.data<T>(), r.y.data<T>(), r.mask.data<std::uint8_t>(), n, p, keep_scale(p), seed);
    PW_CUDA_CHECK_LAUNCH();
  });
  return r;
}

Tensor dropout_backward(const Tensor& grad_y, const Tensor& mask, double p) {
  detail::require_cuda_float(grad_y, "dropout_backward: grad_y");
  PW_CHECK(mask.dtype() == DType::U8 && mask.numel() == grad_y.numel() && mask.device() == grad_y.device(),
           "dropout_backward: mask " << mask.describe() << " does not fit grad_y " << grad_y.describe());
  const Device dev = grad_y.device();
  CudaDeviceGuard guard(dev.index);
  Tensor grad_x = Tensor::empty(grad_y.shape(), grad_y.dtype(), dev);
  const std::int64_t n = grad_y.numel();
  if (n == 0) return grad_x;
  detail::visit_cuda_float(grad_y.dtype(), "dropout_backward", [&](auto tag) {
    using T = decltype(tag);
    dropout_backward_kernel<T><<<blocks_for(n), kThreads, 0, stream_of(dev)>>>(
        grad_y.data<T>(), mask.data<std::uint8_t>(), grad_x.data<T>(), n, keep_scale(p));
    PW_CUDA_CHECK_LAUNCH();
  });
  return grad_x;
}

}  // namespace pw::kernels::cuda
