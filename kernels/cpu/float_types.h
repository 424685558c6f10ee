#pragma once
// Runs a generic body once with the C++ type of a floating tensor: F32 -> float, F64 -> double.
//   visit_float(x.dtype(), "relu_forward", [&](auto tag) { using T = decltype(tag); ... });
#include "core/error.h"
#include "kernels/device.h"

namespace pw::kernels::cpu {

template <typename Body>
decltype(auto) visit_float(DType dtype, const char* op, Body&& body) {
  switch (dtype) {
    case DType::F32: return body(float{});
    case DType::F64: return body(double{});
    default: PW_FAIL("" << op << ": the CPU backend supports F32 and F64, got " << dtype_name(dtype));
  }
}

}  // namespace pw::kernels::cpu
