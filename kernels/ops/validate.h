#pragma once
// Input checks shared by the public op entry points (kernels/ops/*.cpp). Each throws pw::Error
// naming the op and the offending tensor, so a failure deep in a stage says what was passed.
#include <initializer_list>
#include <utility>

#include "core/error.h"
#include "kernels/ops/half_support.h"
#include "kernels/tensor.h"

namespace pw::kernels::detail {

// Optional arguments (a bias) may be undefined tensors; the group checks then skip them.
enum class Presence { Required, Optional };

// A tensor argument together with the name the op's contract gives it ("x", "grad_y", ...).
struct Arg {
  const Tensor& tensor;
  const char* name;
  Presence presence = Presence::Required;
};

inline bool skipped(const Arg& a) { return a.presence == Presence::Optional && !a.tensor.defined(); }

inline void check_defined(const char* op, const Arg& a) {
  PW_CHECK(a.tensor.defined(), "" << op << ": " << a.name << " is an undefined tensor");
}

inline void check_ndim(const char* op, const Arg& a, int ndim, const char* layout) {
  check_defined(op, a);
  PW_CHECK(a.tensor.ndim() == ndim,
           "" << op << ": " << a.name << " must be " << ndim << "-D " << layout << ", got " << a.tensor.describe());
}

inline bool is_floating(DType dtype) { return is_floating_point(dtype); }

inline void check_floating(const char* op, const Arg& a) {
  check_defined(op, a);
  PW_CHECK(is_floating(a.tensor.dtype()),
           "" << op << ": " << a.name << " must be F32, F64, BF16 or F16, got " << a.tensor.describe());
}

// F32 or F64: ops that keep full precision in mixed-precision training (losses, optimizer updates,
// embedding tables) take no 16-bit operands.
inline void check_full_precision(const char* op, const Arg& a) {
  check_defined(op, a);
  PW_CHECK(a.tensor.dtype() == DType::F32 || a.tensor.dtype() == DType::F64,
           "" << op << ": " << a.name << " must be F32 or F64, got " << a.tensor.describe());
}

// The dtype of parameters and their gradients beside activations of dtype `data`: the same, or F32
// for 16-bit activations (mixed precision keeps F32 master weights and F32 gradient sums).
inline DType master_dtype(DType data) { return is_half(data) ? DType::F32 : data; }

inline void check_master_dtype(const char* op, DType data, std::initializer_list<Arg> args) {
  const DType want = master_dtype(data);
  for (const Arg& a : args) {
    if (skipped(a)) continue;
    check_defined(op, a);
    PW_CHECK(a.tensor.dtype() == want, "" << op << ": " << a.name << " must be " << dtype_name(want) << " beside "
                                          << dtype_name(data) << " activations, got " << a.tensor.describe());
  }
}

inline void check_dtype_is(const char* op, const Arg& a, DType dtype) {
  check_defined(op, a);
  PW_CHECK(a.tensor.dtype() == dtype,
           "" << op << ": " << a.name << " must be " << dtype_name(dtype) << ", got " << a.tensor.describe());
}

// All floating tensors of one op share the dtype of the first.
inline void check_same_float_dtype(const char* op, std::initializer_list<Arg> args) {
  const Arg& first = *args.begin();
  check_floating(op, first);
  for (const Arg& a : args) {
    if (skipped(a)) continue;
    check_defined(op, a);
    PW_CHECK(a.tensor.dtype() == first.tensor.dtype(), "" << op << ": " << a.name << " and " << first.name
                                                          << " must have the same dtype, got " << a.tensor.describe()
                                                          << " and " << first.tensor.describe());
  }
}

// All tensors of one op live on the device of the first; returns that device for dispatch.
inline Device check_same_device(const char* op, std::initializer_list<Arg> args) {
  const Arg& first = *args.begin();
  check_defined(op, first);
  for (const Arg& a : args) {
    if (skipped(a)) continue;
    check_defined(op, a);
    PW_CHECK(a.tensor.device() == first.tensor.device(), "" << op << ": all tensors must be on one device; " << a.name
                                                            << " is " << a.tensor.describe() << " but " << first.name
                                                            << " is " << first.tensor.describe());
  }
  return first.tensor.device();
}

inline void check_shape_is(const char* op, const Arg& a, const Shape& expected) {
  check_defined(op, a);
  PW_CHECK(a.tensor.shape() == expected,
           "" << op << ": " << a.name << " must have shape " << shape_str(expected) << ", got " << a.tensor.describe());
}

}  // namespace pw::kernels::detail
