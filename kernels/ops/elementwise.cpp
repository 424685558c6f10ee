#include "kernels/ops/elementwise.h"

#include "kernels/dispatch.h"
#include "kernels/ops/validate.h"

namespace pw::kernels {

using detail::Arg;

namespace {

Device check_pair(const char* op, const Arg& a, const Arg& b) {
  detail::check_same_float_dtype(op, {a, b});
  detail::check_shape_is(op, b, a.tensor.shape());
  return detail::check_same_device(op, {a, b});
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  const Device device = check_pair("add", {a, "a"}, {b, "b"});
  if (!runs_natively(device, a.dtype(), HalfOp::Elementwise)) return add(a.to(DType::F32), b.to(DType::F32)).to(a.dtype());
  return PW_DISPATCH(device, add, a, b);
}

void add_inplace(Tensor& dst, const Tensor& src, double alpha) {
  const Device device = check_pair("add_inplace", {dst, "dst"}, {src, "src"});
  if (!runs_natively(device, dst.dtype(), HalfOp::Elementwise)) {
    Tensor wide = dst.to(DType::F32);
    add_inplace(wide, src.to(DType::F32), alpha);
    dst.copy_from(wide.to(dst.dtype()));
    return;
  }
  PW_DISPATCH(device, add_inplace, dst, src, alpha);
}

void scale_inplace(Tensor& t, double alpha) {
  detail::check_floating("scale_inplace", {t, "t"});
  if (!runs_natively(t.device(), t.dtype(), HalfOp::Elementwise)) {
    Tensor wide = t.to(DType::F32);
    scale_inplace(wide, alpha);
    t.copy_from(wide.to(t.dtype()));
    return;
  }
  PW_DISPATCH(t.device(), scale_inplace, t, alpha);
}

double sum(const Tensor& t) {
  detail::check_floating("sum", {t, "t"});
  if (!runs_natively(t.device(), t.dtype(), HalfOp::Elementwise)) return sum(t.to(DType::F32));
  return PW_DISPATCH(t.device(), sum, t);
}

double sum_of_squares(const Tensor& t) {
  detail::check_floating("sum_of_squares", {t, "t"});
  if (!runs_natively(t.device(), t.dtype(), HalfOp::Elementwise)) return sum_of_squares(t.to(DType::F32));
  return PW_DISPATCH(t.device(), sum_of_squares, t);
}

std::vector<double> sums_of_squares(const std::vector<Tensor>& ts) {
  if (ts.empty()) return {};
  const Device device = ts.front().device();
  std::vector<Tensor> native;
  native.reserve(ts.size());
  for (std::size_t i = 0; i < ts.size(); ++i) {
    detail::check_floating("sums_of_squares", {ts[i], "ts[i]"});
    PW_CHECK(ts[i].device() == device, "sums_of_squares: tensor " << i << " is on " << ts[i].device().str()
                                                                  << ", tensor 0 on " << device.str());
    native.push_back(runs_natively(device, ts[i].dtype(), HalfOp::Elementwise) ? ts[i] : ts[i].to(DType::F32));
  }
  return PW_DISPATCH(device, sums_of_squares, native);
}

}  // namespace pw::kernels
