#include "kernels/ops/conv2d.h"

#include "kernels/dispatch.h"
#include "kernels/ops/validate.h"

namespace pw::kernels {

using detail::Arg;

Shape conv2d_output_shape(const Shape& x, const Shape& w, const Conv2dParams& p) {
  PW_CHECK(x.size() == 4, "conv2d: input must be 4-D [N, C, H, W], got " << shape_str(x));
  PW_CHECK(w.size() == 4, "conv2d: weight must be 4-D [Cout, Cin, KH, KW], got " << shape_str(w));
  PW_CHECK(x[1] == w[1], "conv2d: input " << shape_str(x) << " has " << x[1] << " channels but weight "
                                          << shape_str(w) << " expects " << w[1]);
  PW_CHECK(p.stride_h >= 1 && p.stride_w >= 1, "conv2d: strides must be >= 1, got " << p.stride_h << "x" << p.stride_w);
  PW_CHECK(p.pad_h >= 0 && p.pad_w >= 0, "conv2d: padding must be >= 0, got " << p.pad_h << "x" << p.pad_w);
  const std::int64_t padded_h = x[2] + 2 * p.pad_h;
  const std::int64_t padded_w = x[3] + 2 * p.pad_w;
  PW_CHECK(padded_h >= w[2] && padded_w >= w[3], "conv2d: kernel " << w[2] << "x" << w[3]
                                                                   << " is larger than the padded input of "
                                                                   << shape_str(x) << " (padding " << p.pad_h << "x"
                                                                   << p.pad_w << ")");
  return {x[0], w[0], (padded_h - w[2]) / p.stride_h + 1, (padded_w - w[3]) / p.stride_w + 1};
}

namespace {

void check_bias(const char* op, const Tensor& bias, const char* name, const Tensor& w) {
  if (!bias.defined()) return;
  detail::check_shape_is(op, {bias, name}, {w.dim(0)});
}

}  // namespace

Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p) {
  constexpr const char* op = "conv2d_forward";
  detail::check_ndim(op, {x, "x"}, 4, "[N, C, H, W]");
  detail::check_ndim(op, {w, "w"}, 4, "[Cout, Cin, KH, KW]");
  conv2d_output_shape(x.shape(), w.shape(), p);
  check_bias(op, bias, "bias", w);
  const auto optional = detail::Presence::Optional;
  detail::check_same_float_dtype(op, {{x, "x"}, {w, "w"}});
  detail::check_master_dtype(op, x.dtype(), {{bias, "bias", optional}});
  const Device device = detail::check_same_device(op, {{x, "x"}, {w, "w"}, {bias, "bias", optional}});
  if (!runs_natively(device, x.dtype(), HalfOp::Conv))
    return conv2d_forward(x.to(DType::F32), w.to(DType::F32), bias, p).to(x.dtype());
  return PW_DISPATCH(device, conv2d_forward, x, w, bias, p);
}

Tensor conv2d_backward_data(const Tensor& grad_y, const Tensor& w, const Shape& x_shape, const Conv2dParams& p) {
  constexpr const char* op = "conv2d_backward_data";
  detail::check_ndim(op, {grad_y, "grad_y"}, 4, "[N, Cout, OH, OW]");
  detail::check_ndim(op, {w, "w"}, 4, "[Cout, Cin, KH, KW]");
  const Shape y_shape = conv2d_output_shape(x_shape, w.shape(), p);
  detail::check_shape_is(op, {grad_y, "grad_y"}, y_shape);
  detail::check_same_float_dtype(op, {{grad_y, "grad_y"}, {w, "w"}});
  const Device device = detail::check_same_device(op, {{grad_y, "grad_y"}, {w, "w"}});
  if (!runs_natively(device, grad_y.dtype(), HalfOp::Conv))
    return conv2d_backward_data(grad_y.to(DType::F32), w.to(DType::F32), x_shape, p).to(grad_y.dtype());
  return PW_DISPATCH(device, conv2d_backward_data, grad_y, w, x_shape, p);
}

void conv2d_backward_filter(const Tensor& x, const Tensor& grad_y, Tensor& grad_w, Tensor& grad_bias,
                            const Conv2dParams& p) {
  constexpr const char* op = "conv2d_backward_filter";
  detail::check_ndim(op, {x, "x"}, 4, "[N, C, H, W]");
  detail::check_ndim(op, {grad_w, "grad_w"}, 4, "[Cout, Cin, KH, KW]");
  detail::check_ndim(op, {grad_y, "grad_y"}, 4, "[N, Cout, OH, OW]");
  const Shape y_shape = conv2d_output_shape(x.shape(), grad_w.shape(), p);
  detail::check_shape_is(op, {grad_y, "grad_y"}, y_shape);
  check_bias(op, grad_bias, "grad_bias", grad_w);
  const auto optional = detail::Presence::Optional;
  const std::initializer_list<detail::Arg> all = {
      {x, "x"}, {grad_y, "grad_y"}, {grad_w, "grad_w"}, {grad_bias, "grad_bias", optional}};
  detail::check_same_float_dtype(op, {{x, "x"}, {grad_y, "grad_y"}});
  detail::check_master_dtype(op, x.dtype(), {{grad_w, "grad_w"}, {grad_bias, "grad_bias", optional}});
  const Device device = detail::check_same_device(op, all);
  if (!runs_natively(device, x.dtype(), HalfOp::Conv))
    return conv2d_backward_filter(x.to(DType::F32), grad_y.to(DType::F32), grad_w, grad_bias, p);
  PW_DISPATCH(device, conv2d_backward_filter, x, grad_y, grad_w, grad_bias, p);
}

}  // namespace pw::kernels
