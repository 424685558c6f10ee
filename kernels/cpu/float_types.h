#pragma once
// Runs a generic body once with the C++ type of a floating tensor.
//   visit_float(x.dtype(), "relu_forward", [&](auto tag) { using T = decltype(tag); ... });
// visit_float covers F32 -> float and F64 -> double (what the reference loops compute in);
// visit_any_float adds the 16-bit storage types Bf16 and F16, which loops read and write through
// load() / store<T>() and compute on in float (compute_t<T>).
#include <cstdint>
#include <type_traits>

#include "core/error.h"
#include "kernels/device.h"
#include "kernels/half_float.h"

namespace pw::kernels::cpu {

struct Bf16 {
  std::uint16_t bits;
};
struct F16 {
  std::uint16_t bits;
};

template <typename T>
using compute_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

inline float load(float v) { return v; }
inline double load(double v) { return v; }
inline float load(Bf16 v) { return bf16_to_float(v.bits); }
inline float load(F16 v) { return f16_to_float(v.bits); }

template <typename T>
T store(compute_t<T> v) {
  if constexpr (std::is_same_v<T, Bf16>) return Bf16{float_to_bf16(v)};
  else if constexpr (std::is_same_v<T, F16>) return F16{float_to_f16(v)};
  else return v;
}

template <typename Body>
decltype(auto) visit_float(DType dtype, const char* op, Body&& body) {
  switch (dtype) {
    case DType::F32: return body(float{});
    case DType::F64: return body(double{});
    default: PW_FAIL("" << op << ": the CPU backend supports F32 and F64 here, got " << dtype_name(dtype));
  }
}

template <typename Body>
decltype(auto) visit_any_float(DType dtype, const char* op, Body&& body) {
  switch (dtype) {
    case DType::F32: return body(float{});
    case DType::F64: return body(double{});
    case DType::BF16: return body(Bf16{});
    case DType::F16: return body(F16{});
    default: PW_FAIL("" << op << ": the CPU backend supports F32, F64, BF16 and F16, got " << dtype_name(dtype));
  }
}

}  // namespace pw::kernels::cpu
