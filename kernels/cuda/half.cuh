#pragma once
// 16-bit floats in the CUDA op files: the element type of each floating dtype the CUDA backend
// computes in (F32, BF16, F16), loads to float and round-to-nearest-even stores (the same rounding
// as kernels/half_float.h and cast.cu), and the dtype check of the kernels that take all three.
// 16-bit data is computed in float and rounded once per result, as the CPU backend does.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "kernels/cuda/common.cuh"

namespace pw::kernels::cuda::detail {

template <typename T>
inline constexpr bool is_half_type = std::is_same_v<T, __nv_bfloat16> || std::is_same_v<T, __half>;

__device__ __forceinline__ float load(float v) { return v; }
__device__ __forceinline__ float load(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float load(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T store(float v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(v);
  else if constexpr (std::is_same_v<T, __half>) return __float2half_rn(v);
  else return v;
}

// F32, BF16 or F16 on a CUDA device (F64 runs on CPU devices only).
inline void require_cuda_float(const Tensor& t, const char* what) {
  PW_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::BF16 || t.dtype() == DType::F16,
           "" << what << ": the CUDA path supports F32, BF16 and F16, got " << t.describe());
  PW_CHECK(t.device().is_cuda(), "" << what << ": expected a CUDA tensor, got " << t.describe());
}

// Runs `body` once with a value of the element type of `dtype` (float, __nv_bfloat16, __half):
//   visit_cuda_float(x.dtype(), "relu_forward", [&](auto tag) { using T = decltype(tag); ... });
template <typename Body>
decltype(auto) visit_cuda_float(DType dtype, const char* what, Body&& body) {
  switch (dtype) {
    case DType::F32: return body(float{});
    case DType::BF16: return body(__nv_bfloat16{});
    case DType::F16: return body(__half{});
    default: PW_FAIL("" << what << ": the CUDA path supports F32, BF16 and F16, got " << dtype_name(dtype));
  }
}

}  // namespace pw::kernels::cuda::detail
