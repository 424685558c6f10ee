#include "kernels/ops/linear.h"

#include "kernels/dispatch.h"
#include "kernels/ops/validate.h"

namespace pw::kernels {

using detail::Arg;
using detail::Presence;

Tensor linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias) {
  constexpr const char* op = "linear_forward";
  detail::check_ndim(op, {x, "x"}, 2, "[N, K]");
  detail::check_ndim(op, {w, "w"}, 2, "[M, K]");
  PW_CHECK(x.dim(1) == w.dim(1), "" << op << ": x " << x.describe() << " and w " << w.describe() << " disagree on K");
  if (bias.defined()) detail::check_shape_is(op, {bias, "bias"}, {w.dim(0)});
  const std::initializer_list<Arg> all = {{x, "x"}, {w, "w"}, {bias, "bias", Presence::Optional}};
  detail::check_same_float_dtype(op, {{x, "x"}, {w, "w"}});
  detail::check_master_dtype(op, x.dtype(), {{bias, "bias", Presence::Optional}});
  const Device device = detail::check_same_device(op, all);
  if (!runs_natively(device, x.dtype(), HalfOp::Matmul))
    return linear_forward(x.to(DType::F32), w.to(DType::F32), bias).to(x.dtype());
  return PW_DISPATCH(device, linear_forward, x, w, bias);
}

Tensor linear_backward_data(const Tensor& grad_y, const Tensor& w) {
  constexpr const char* op = "linear_backward_data";
  detail::check_ndim(op, {grad_y, "grad_y"}, 2, "[N, M]");
  detail::check_ndim(op, {w, "w"}, 2, "[M, K]");
  PW_CHECK(grad_y.dim(1) == w.dim(0),
           "" << op << ": grad_y " << grad_y.describe() << " and w " << w.describe() << " disagree on M");
  const std::initializer_list<Arg> all = {{grad_y, "grad_y"}, {w, "w"}};
  detail::check_same_float_dtype(op, all);
  const Device device = detail::check_same_device(op, all);
  if (!runs_natively(device, grad_y.dtype(), HalfOp::Matmul))
    return linear_backward_data(grad_y.to(DType::F32), w.to(DType::F32)).to(grad_y.dtype());
  return PW_DISPATCH(device, linear_backward_data, grad_y, w);
}

void linear_backward_weight(const Tensor& x, const Tensor& grad_y, Tensor& grad_w, Tensor& grad_bias) {
  constexpr const char* op = "linear_backward_weight";
  detail::check_ndim(op, {x, "x"}, 2, "[N, K]");
  detail::check_ndim(op, {grad_y, "grad_y"}, 2, "[N, M]");
  PW_CHECK(x.dim(0) == grad_y.dim(0),
           "" << op << ": x " << x.describe() << " and grad_y " << grad_y.describe() << " disagree on N");
  detail::check_shape_is(op, {grad_w, "grad_w"}, {grad_y.dim(1), x.dim(1)});
  if (grad_bias.defined()) detail::check_shape_is(op, {grad_bias, "grad_bias"}, {grad_y.dim(1)});
  const std::initializer_list<Arg> all = {
      {x, "x"}, {grad_y, "grad_y"}, {grad_w, "grad_w"}, {grad_bias, "grad_bias", Presence::Optional}};
  detail::check_same_float_dtype(op, {{x, "x"}, {grad_y, "grad_y"}});
  detail::check_master_dtype(op, x.dtype(), {{grad_w, "grad_w"}, {grad_bias, "grad_bias", Presence::Optional}});
  const Device device = detail::check_same_device(op, all);
  if (!runs_natively(device, x.dtype(), HalfOp::Matmul))
    return linear_backward_weight(x.to(DType::F32), grad_y.to(DType::F32), grad_w, grad_bias);
  PW_DISPATCH(device, linear_backward_weight, x, grad_y, grad_w, grad_bias);
}

Tensor matmul(const Tensor& a, const Tensor& b, Transpose ta, Transpose tb) {
  constexpr const char* op = "matmul";
  detail::check_ndim(op, {a, "a"}, 2, "matrix");
  detail::check_ndim(op, {b, "b"}, 2, "matrix");
  const std::int64_t k_a = ta == Transpose::No ? a.dim(1) : a.dim(0);
  const std::int64_t k_b = tb == Transpose::No ? b.dim(0) : b.dim(1);
  PW_CHECK(k_a == k_b, "" << op << ": inner dimensions differ: op(a) from " << a.describe() << " has " << k_a
                          << " columns, op(b) from " << b.describe() << " has " << k_b << " rows");
  const std::initializer_list<Arg> all = {{a, "a"}, {b, "b"}};
  detail::check_same_float_dtype(op, all);
  const Device device = detail::check_same_device(op, all);
  if (!runs_natively(device, a.dtype(), HalfOp::Matmul))
    return matmul(a.to(DType::F32), b.to(DType::F32), ta, tb).to(a.dtype());
  return PW_DISPATCH(device, matmul, a, b, ta, tb);
}

}  // namespace pw::kernels
