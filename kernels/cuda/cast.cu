// Conversions between F32, F64, BF16 and F16 on CUDA: one grid-stride kernel per (from, to) pair,
// rounding with CUDA's round-to-nearest-even intrinsics (the same results as kernels/half_float.h).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace pw::kernels::cuda {
namespace {

using detail::blocks_for;
using detail::kThreads;

template <typename T>
__device__ __forceinline__ double widen(T v);
template <>
__device__ __forceinline__ double widen(float v) { return v; }
template <>
__device__ __forceinline__ double widen(double v) { return v; }
template <>
__device__ __forceinline__ double widen(__nv_bfloat16 v) { return __bfloat162float(v); }
template <>
__device__ __forceinline__ double widen(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T narrow(double v);
template <>
__device__ __forceinline__ float narrow(double v) { return static_cast<float>(v); }
template <>
__device__ __forceinline__ double narrow(double v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 narrow(double v) { return __float2bfloat16_rn(static_cast<float>(v)); }
template <>
__device__ __forceinline__ __half narrow(double v) { return __float2half_rn(static_cast<float>(v)); }

template <typename From, typename To>
__global__ void cast_kernel(const From* __restrict__ in, To* __restrict__ out, std::int64_t n) {
  PW_CUDA_KERNEL_LOOP(i, n) { out[i] = narrow<To>(widen(in[i])); }
}

template <typename Body>
void visit_floating(DType dtype, Body&& body) {
  switch (dtype) {
    case DType::F32: return body(float{});
    case DType::F64: return body(double{});
    case DType::BF16: return body(__nv_bfloat16{});
    case DType::F16: return body(__half{});
    default: PW_FAIL("cast: " << dtype_name(dtype) << " is not a floating dtype");
  }
}

}  // namespace

Tensor cast(const Tensor& x, DType dtype) {
  const Device dev = x.device();
  CudaDeviceGuard guard(dev.index);
  Tensor out = Tensor::empty(x.shape(), dtype, dev);
  const std::int64_t n = x.numel();
  if (n == 0) return out;
  visit_floating(x.dtype(), [&](auto from) {
    visit_floating(dtype, [&](auto to) {
      using From = decltype(from);
      using To = decltype(to);
      cast_kernel<From, To><<<blocks_for(n), kThreads, 0, stream_of(dev)>>>(static_cast<const From*>(x.raw()),
                                                                             static_cast<To*>(out.raw()), n);
      PW_CUDA_CHECK_LAUNCH();
    });
  });
  return out;
}

}  // namespace pw::kernels::cuda
