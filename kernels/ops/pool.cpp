#include "kernels/ops/pool.h"

#include "kernels/dispatch.h"
#include "kernels/ops/validate.h"

namespace pw::kernels {

Shape pool2d_output_shape(const Shape& x, const Pool2dParams& p) {
  PW_CHECK(x.size() == 4, "pool2d: input must be 4-D [N, C, H, W], got " << shape_str(x));
  PW_CHECK(p.kernel_h >= 1 && p.kernel_w >= 1, "pool2d: kernel must be >= 1, got " << p.kernel_h << "x" << p.kernel_w);
  PW_CHECK(p.stride_h >= 1 && p.stride_w >= 1, "pool2d: strides must be >= 1, got " << p.stride_h << "x" << p.stride_w);
  // As PyTorch: a window may not start or end entirely inside the padding.
  PW_CHECK(p.pad_h >= 0 && p.pad_w >= 0 && 2 * p.pad_h <= p.kernel_h && 2 * p.pad_w <= p.kernel_w,
           "pool2d: padding " << p.pad_h << "x" << p.pad_w << " must be >= 0 and at most half the kernel "
                              << p.kernel_h << "x" << p.kernel_w);
  const std::int64_t padded_h = x[2] + 2 * p.pad_h;
  const std::int64_t padded_w = x[3] + 2 * p.pad_w;
  PW_CHECK(padded_h >= p.kernel_h && padded_w >= p.kernel_w, "pool2d: kernel " << p.kernel_h << "x" << p.kernel_w
                                                                               << " is larger than the padded input "
                                                                               << shape_str(x));
  return {x[0], x[1], (padded_h - p.kernel_h) / p.stride_h + 1, (padded_w - p.kernel_w) / p.stride_w + 1};
}

namespace {

void check_pool_backward(const char* op, const Tensor& grad_y, const Shape& x_shape, const Pool2dParams& p) {
  detail::check_floating(op, {grad_y, "grad_y"});
  detail::check_shape_is(op, {grad_y, "grad_y"}, pool2d_output_shape(x_shape, p));
}

}  // namespace

MaxPoolResult max_pool2d_forward(const Tensor& x, const Pool2dParams& p) {
  detail::check_ndim("max_pool2d_forward", {x, "x"}, 4, "[N, C, H, W]");
  detail::check_floating("max_pool2d_forward", {x, "x"});
  pool2d_output_shape(x.shape(), p);
  if (!runs_natively(x.device(), x.dtype(), HalfOp::Pool)) {
    MaxPoolResult r = max_pool2d_forward(x.to(DType::F32), p);   // its workspace is the F32 one backward uses
    r.y = r.y.to(x.dtype());
    return r;
  }
  return PW_DISPATCH(x.device(), max_pool2d_forward, x, p);
}

Tensor max_pool2d_backward(const Tensor& grad_y, const Tensor& workspace, const Shape& x_shape, const Pool2dParams& p) {
  constexpr const char* op = "max_pool2d_backward";
  check_pool_backward(op, grad_y, x_shape, p);
  const Device device = detail::check_same_device(op, {{grad_y, "grad_y"}, {workspace, "workspace"}});
  if (!runs_natively(device, grad_y.dtype(), HalfOp::Pool))
    return max_pool2d_backward(grad_y.to(DType::F32), workspace, x_shape, p).to(grad_y.dtype());
  return PW_DISPATCH(device, max_pool2d_backward, grad_y, workspace, x_shape, p);
}

Tensor avg_pool2d_forward(const Tensor& x, const Pool2dParams& p) {
  detail::check_ndim("avg_pool2d_forward", {x, "x"}, 4, "[N, C, H, W]");
  detail::check_floating("avg_pool2d_forward", {x, "x"});
  pool2d_output_shape(x.shape(), p);
  if (!runs_natively(x.device(), x.dtype(), HalfOp::Pool))
    return avg_pool2d_forward(x.to(DType::F32), p).to(x.dtype());
  return PW_DISPATCH(x.device(), avg_pool2d_forward, x, p);
}

Tensor avg_pool2d_backward(const Tensor& grad_y, const Shape& x_shape, const Pool2dParams& p) {
  check_pool_backward("avg_pool2d_backward", grad_y, x_shape, p);
  if (!runs_natively(grad_y.device(), grad_y.dtype(), HalfOp::Pool))
    return avg_pool2d_backward(grad_y.to(DType::F32), x_shape, p).to(grad_y.dtype());
  return PW_DISPATCH(grad_y.device(), avg_pool2d_backward, grad_y, x_shape, p);
}

Tensor adaptive_avg_pool2d_forward(const Tensor& x, int out_h, int out_w) {
  constexpr const char* op = "adaptive_avg_pool2d_forward";
  detail::check_ndim(op, {x, "x"}, 4, "[N, C, H, W]");
  detail::check_floating(op, {x, "x"});
  PW_CHECK(out_h >= 1 && out_w >= 1, "" << op << ": output size must be >= 1, got " << out_h << "x" << out_w);
  PW_CHECK(x.dim(2) >= 1 && x.dim(3) >= 1, "" << op << ": empty spatial input " << x.describe());
  if (!runs_natively(x.device(), x.dtype(), HalfOp::AdaptivePool))
    return adaptive_avg_pool2d_forward(x.to(DType::F32), out_h, out_w).to(x.dtype());
  return PW_DISPATCH(x.device(), adaptive_avg_pool2d_forward, x, out_h, out_w);
}

Tensor adaptive_avg_pool2d_backward(const Tensor& grad_y, const Shape& x_shape) {
  constexpr const char* op = "adaptive_avg_pool2d_backward";
  detail::check_ndim(op, {grad_y, "grad_y"}, 4, "[N, C, OH, OW]");
  detail::check_floating(op, {grad_y, "grad_y"});
  PW_CHECK(x_shape.size() == 4 && x_shape[0] == grad_y.dim(0) && x_shape[1] == grad_y.dim(1),
           "" << op << ": input shape " << shape_str(x_shape) << " does not match grad_y " << grad_y.describe());
  if (!runs_natively(grad_y.device(), grad_y.dtype(), HalfOp::AdaptivePool))
    return adaptive_avg_pool2d_backward(grad_y.to(DType::F32), x_shape).to(grad_y.dtype());
  return PW_DISPATCH(grad_y.device(), adaptive_avg_pool2d_backward, grad_y, x_shape);
}

}  // namespace pw::kernels
