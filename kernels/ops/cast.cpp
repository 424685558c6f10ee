#include "kernels/ops/cast.h"

#include "kernels/dispatch.h"

namespace pw::kernels {

Tensor cast(const Tensor& x, DType dtype) {
  PW_CHECK(x.defined(), "cast of an undefined tensor");
  if (x.dtype() == dtype) return x;
  PW_CHECK(is_floating_point(x.dtype()) && is_floating_point(dtype), "cast: no conversion from " << dtype_name(x.dtype())
                                                             << " to " << dtype_name(dtype)
                                                             << "; F32, F64, BF16 and F16 convert to each other");
  return PW_DISPATCH(x.device(), cast, x, dtype);
}

}  // namespace pw::kernels
