#include "kernels/ops/dropout.h"

#include "kernels/dispatch.h"
#include "kernels/ops/validate.h"

namespace pw::kernels {

namespace {

void check_probability(const char* op, double p) {
  PW_CHECK(p >= 0.0 && p <= 1.0, "" << op << ": drop probability must be in [0, 1], got " << p);
}

}  // namespace

DropoutResult dropout_forward(const Tensor& x, double p, std::uint64_t seed) {
  check_probability("dropout_forward", p);
  detail::check_floating("dropout_forward", {x, "x"});
  if (!runs_natively(x.device(), x.dtype(), HalfOp::Elementwise)) {
    DropoutResult r = dropout_forward(x.to(DType::F32), p, seed);
    r.y = r.y.to(x.dtype());
    return r;
  }
  return PW_DISPATCH(x.device(), dropout_forward, x, p, seed);
}

Tensor dropout_backward(const Tensor& grad_y, const Tensor& mask, double p) {
  constexpr const char* op = "dropout_backward";
  check_probability(op, p);
  detail::check_floating(op, {grad_y, "grad_y"});
  detail::check_dtype_is(op, {mask, "mask"}, DType::U8);
  detail::check_shape_is(op, {mask, "mask"}, grad_y.shape());
  const Device device = detail::check_same_device(op, {{grad_y, "grad_y"}, {mask, "mask"}});
  if (!runs_natively(device, grad_y.dtype(), HalfOp::Elementwise))
    return dropout_backward(grad_y.to(DType::F32), mask, p).to(grad_y.dtype());
  return PW_DISPATCH(device, dropout_backward, grad_y, mask, p);
}

}  // namespace pw::kernels
