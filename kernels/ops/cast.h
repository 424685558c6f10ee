#pragma once
// Element type conversion between the floating dtypes (F32, F64, BF16, F16), on the tensor's
// device. Narrowing rounds to nearest even (kernels/half_float.h); NaN and infinities carry over,
// values past a format's range become infinity.
#include "kernels/tensor.h"

namespace pw::kernels {

Tensor cast(const Tensor& x, DType dtype);   // returns x itself when it already has `dtype`

}  // namespace pw::kernels
