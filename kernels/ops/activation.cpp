#include "kernels/ops/activation.h"

#include "kernels/dispatch.h"
#include "kernels/ops/validate.h"

namespace pw::kernels {

Tensor relu_forward(const Tensor& x) {
  detail::check_floating("relu_forward", {x, "x"});
  return PW_DISPATCH(x.device(), relu_forward, x);
}

Tensor relu_backward(const Tensor& y, const Tensor& grad_y) {
  constexpr const char* op = "relu_backward";
  detail::check_same_float_dtype(op, {{y, "y"}, {grad_y, "grad_y"}});
  detail::check_shape_is(op, {grad_y, "grad_y"}, y.shape());
  const Device device = detail::check_same_device(op, {{y, "y"}, {grad_y, "grad_y"}});
  return PW_DISPATCH(device, relu_backward, y, grad_y);
}

}  // namespace pw::kernels
