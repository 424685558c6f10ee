#include "kernels/ops/activation.h"

#include "kernels/dispatch.h"
#include "kernels/ops/validate.h"

namespace pw::kernels {

Tensor relu_forward(const Tensor& x) {
  detail::check_floating("relu_forward", {x, "x"});
  if (!runs_natively(x.device(), x.dtype(), HalfOp::Elementwise)) return relu_forward(x.to(DType::F32)).to(x.dtype());
  return PW_DISPATCH(x.device(), relu_forward, x);
}

Tensor relu_backward(const Tensor& y, const Tensor& grad_y) {
  constexpr const char* op = "relu_backward";
  detail::check_same_float_dtype(op, {{y, "y"}, {grad_y, "grad_y"}});
  detail::check_shape_is(op, {grad_y, "grad_y"}, y.shape());
  const Device device = detail::check_same_device(op, {{y, "y"}, {grad_y, "grad_y"}});
  if (!runs_natively(device, y.dtype(), HalfOp::Elementwise))
    return relu_backward(y.to(DType::F32), grad_y.to(DType::F32)).to(y.dtype());
  return PW_DISPATCH(device, relu_backward, y, grad_y);
}

}  // namespace pw::kernels
