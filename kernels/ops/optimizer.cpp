#include "kernels/ops/optimizer.h"

#include "kernels/dispatch.h"
#include "kernels/ops/validate.h"

namespace pw::kernels {

using detail::Arg;

namespace {

// Every state tensor matches the parameter in shape, dtype and device.
Device check_state(const char* op, std::initializer_list<Arg> all) {
  const Arg& param = *all.begin();
  for (const Arg& a : all) detail::check_shape_is(op, a, param.tensor.shape());
  detail::check_full_precision(op, *all.begin());
  detail::check_same_float_dtype(op, all);
  return detail::check_same_device(op, all);
}

}  // namespace

void sgd_update(Tensor& param, const Tensor& grad, Tensor& momentum_buf, const SgdParams& p, std::int64_t step) {
  constexpr const char* op = "sgd_update";
  PW_CHECK(step >= 1, "" << op << ": step counts from 1, got " << step);
  PW_CHECK(p.lr >= 0.0 && p.momentum >= 0.0 && p.weight_decay >= 0.0,
           "" << op << ": lr, momentum and weight_decay must be >= 0, got " << p.lr << ", " << p.momentum << ", "
              << p.weight_decay);
  Device device;
  if (p.momentum != 0.0) {
    device = check_state(op, {{param, "param"}, {grad, "grad"}, {momentum_buf, "momentum_buf"}});
  } else {
    device = check_state(op, {{param, "param"}, {grad, "grad"}});   // the buffer is unused without momentum
  }
  PW_DISPATCH(device, sgd_update, param, grad, momentum_buf, p, step);
}

void adam_update(Tensor& param, const Tensor& grad, Tensor& m, Tensor& v, const AdamParams& p, std::int64_t step) {
  constexpr const char* op = "adam_update";
  PW_CHECK(step >= 1, "" << op << ": step counts from 1, got " << step);
  PW_CHECK(p.beta1 >= 0.0 && p.beta1 < 1.0 && p.beta2 >= 0.0 && p.beta2 < 1.0,
           "" << op << ": betas must be in [0, 1), got " << p.beta1 << ", " << p.beta2);
  PW_CHECK(p.lr >= 0.0 && p.eps >= 0.0 && p.weight_decay >= 0.0,
           "" << op << ": lr, eps and weight_decay must be >= 0, got " << p.lr << ", " << p.eps << ", " << p.weight_decay);
  const Device device = check_state(op, {{param, "param"}, {grad, "grad"}, {m, "m"}, {v, "v"}});
  PW_DISPATCH(device, adam_update, param, grad, m, v, p, step);
}

void adagrad_update(Tensor& param, const Tensor& grad, Tensor& sum_sq, const AdagradParams& p) {
  constexpr const char* op = "adagrad_update";
  PW_CHECK(p.lr >= 0.0 && p.eps >= 0.0 && p.weight_decay >= 0.0,
           "" << op << ": lr, eps and weight_decay must be >= 0, got " << p.lr << ", " << p.eps << ", " << p.weight_decay);
  const Device device = check_state(op, {{param, "param"}, {grad, "grad"}, {sum_sq, "sum_sq"}});
  PW_DISPATCH(device, adagrad_update, param, grad, sum_sq, p);
}

}  // namespace pw::kernels
