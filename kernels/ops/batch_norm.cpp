#include "kernels/ops/batch_norm.h"

#include "kernels/dispatch.h"
#include "kernels/ops/validate.h"

namespace pw::kernels {

using detail::Arg;

namespace {

// x is [N, C, H, W] or [N, C]; returns C.
std::int64_t check_input(const char* op, const Arg& x) {
  detail::check_defined(op, x);
  PW_CHECK(x.tensor.ndim() == 4 || x.tensor.ndim() == 2,
           "" << op << ": " << x.name << " must be 4-D [N, C, H, W] or 2-D [N, C], got " << x.tensor.describe());
  return x.tensor.dim(1);
}

void check_params(const char* op, const BatchNormParams& p) {
  PW_CHECK(p.eps > 0.0, "" << op << ": eps must be > 0, got " << p.eps);
  PW_CHECK(p.momentum >= 0.0 && p.momentum <= 1.0, "" << op << ": momentum must be in [0, 1], got " << p.momentum);
}

}  // namespace

Tensor batch_norm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                                Tensor& running_var, Tensor& save_mean, Tensor& save_invstd,
                                const BatchNormParams& p) {
  constexpr const char* op = "batch_norm_forward_train";
  const std::int64_t channels = check_input(op, {x, "x"});
  check_params(op, p);
  const std::int64_t per_channel = x.numel() / channels;
  PW_CHECK(per_channel > 1, "" << op << ": needs more than one value per channel to compute a batch variance, got "
                               << x.describe());
  const std::initializer_list<Arg> all = {{x, "x"},
                                          {gamma, "gamma"},
                                          {beta, "beta"},
                                          {running_mean, "running_mean"},
                                          {running_var, "running_var"},
                                          {save_mean, "save_mean"},
                                          {save_invstd, "save_invstd"}};
  for (const Arg& a : all) {
    if (&a.tensor != &x) detail::check_shape_is(op, a, {channels});
  }
  detail::check_floating(op, {x, "x"});
  detail::check_master_dtype(op, x.dtype(), {{gamma, "gamma"}, {beta, "beta"}, {running_mean, "running_mean"},
                                             {running_var, "running_var"}, {save_mean, "save_mean"},
                                             {save_invstd, "save_invstd"}});
  const Device device = detail::check_same_device(op, all);
  if (!runs_natively(device, x.dtype(), HalfOp::BatchNormTrain))
    return batch_norm_forward_train(x.to(DType::F32), gamma, beta, running_mean, running_var, save_mean, save_invstd, p)
        .to(x.dtype());
  return PW_DISPATCH(device, batch_norm_forward_train, x, gamma, beta, running_mean, running_var, save_mean,
                     save_invstd, p);
}

Tensor batch_norm_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                               const Tensor& running_var, const BatchNormParams& p) {
  constexpr const char* op = "batch_norm_forward_eval";
  const std::int64_t channels = check_input(op, {x, "x"});
  check_params(op, p);
  const std::initializer_list<Arg> all = {
      {x, "x"}, {gamma, "gamma"}, {beta, "beta"}, {running_mean, "running_mean"}, {running_var, "running_var"}};
  for (const Arg& a : all) {
    if (&a.tensor != &x) detail::check_shape_is(op, a, {channels});
  }
  detail::check_floating(op, {x, "x"});
  detail::check_master_dtype(op, x.dtype(), {{gamma, "gamma"}, {beta, "beta"}, {running_mean, "running_mean"},
                                             {running_var, "running_var"}});
  const Device device = detail::check_same_device(op, all);
  if (!runs_natively(device, x.dtype(), HalfOp::BatchNormEval))
    return batch_norm_forward_eval(x.to(DType::F32), gamma, beta, running_mean, running_var, p).to(x.dtype());
  return PW_DISPATCH(device, batch_norm_forward_eval, x, gamma, beta, running_mean, running_var, p);
}

BatchNormGrads batch_norm_backward(const Tensor& x, const Tensor& grad_y, const Tensor& gamma,
                                   const Tensor& save_mean, const Tensor& save_invstd, const BatchNormParams& p) {
  constexpr const char* op = "batch_norm_backward";
  const std::int64_t channels = check_input(op, {x, "x"});
  check_params(op, p);
  detail::check_shape_is(op, {grad_y, "grad_y"}, x.shape());
  const std::initializer_list<Arg> all = {
      {x, "x"}, {grad_y, "grad_y"}, {gamma, "gamma"}, {save_mean, "save_mean"}, {save_invstd, "save_invstd"}};
  for (const Arg& a : all) {
    if (&a.tensor != &x && &a.tensor != &grad_y) detail::check_shape_is(op, a, {channels});
  }
  detail::check_same_float_dtype(op, {{x, "x"}, {grad_y, "grad_y"}});
  detail::check_master_dtype(op, x.dtype(), {{gamma, "gamma"}, {save_mean, "save_mean"}, {save_invstd, "save_invstd"}});
  const Device device = detail::check_same_device(op, all);
  if (!runs_natively(device, x.dtype(), HalfOp::BatchNormTrain)) {
    BatchNormGrads g = batch_norm_backward(x.to(DType::F32), grad_y.to(DType::F32), gamma, save_mean, save_invstd, p);
    g.grad_x = g.grad_x.to(x.dtype());
    return g;
  }
  return PW_DISPATCH(device, batch_norm_backward, x, grad_y, gamma, save_mean, save_invstd, p);
}

}  // namespace pw::kernels
