// ReLU forward / backward on CUDA, for F32, BF16 and F16. The 16-bit kernels work on the bit
// patterns, as the CPU backend does: a pattern read as int16 is > 0 exactly when the value is
// positive (sign clear, not +0; NaN patterns with the sign clear pass through), so the result is
// exact and bit-identical to the CPU's.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/vectorized.cuh"

namespace pw::kernels::cuda {
namespace {

// ---- element ops (kernels/cuda/vectorized.cuh runs them in 16-byte packs) ----------------------

struct ReluF32 {
  __device__ float operator()(float v) const { return v > 0.0f ? v : 0.0f; }
};
struct ReluGradF32 {   // (y, grad_y) -> grad_x
  __device__ float operator()(float y, float g) const { return y > 0.0f ? g : 0.0f; }
};
struct ReluBits {
  __device__ std::uint16_t operator()(std::uint16_t v) const {
    return static_cast<std::int16_t>(v) > 0 ? v : std::uint16_t{0};
  }
};
struct ReluGradBits {
  __device__ std::uint16_t operator()(std::uint16_t y, std::uint16_t g) const {
    return static_cast<std::int16_t>(y) > 0 ? g : std::uint16_t{0};
  }
};

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
    detail::launch_map1(x.data<std::uint16_t>(), y.data<std::uint16_t>(), n, ReluBits{}, stream);
  } else {
    detail::launch_map1(x.data<float>(), y.data<float>(), n, ReluF32{}, stream);
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
    detail::launch_map2(y.data<std::uint16_t>(), grad_y.data<std::uint16_t>(), grad_x.data<std::uint16_t>(), n,
                        ReluGradBits{}, stream);
  } else {
    detail::launch_map2(y.data<float>(), grad_y.data<float>(), grad_x.data<float>(), n, ReluGradF32{}, stream);
  }
  PW_CUDA_CHECK_LAUNCH();
  return grad_x;
}

}  // namespace pw::kernels::cuda
