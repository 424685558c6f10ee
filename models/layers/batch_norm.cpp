#include "models/layers/batch_norm.h"

#include <cmath>

#include "kernels/ops/elementwise.h"

namespace pw::models {
namespace {
struct BatchNormContext : Context {
  Mode mode = Mode::Train;
  Tensor x, save_mean, save_invstd;
  Tensor grad_gamma, grad_beta;   // computed with the input gradient, added in the weight half
  double local_count = 0.0, group_count = 0.0;   // synchronised: samples per channel here / in the group
};

std::vector<double> host(const Tensor& t) { return t.to_double_vector(); }

Tensor on(const std::vector<double>& values, kernels::Device device) {
  std::vector<float> f(values.begin(), values.end());
  return Tensor::from_vector(f, {static_cast<std::int64_t>(f.size())}, kernels::Device::cpu(0)).to(device);
}

}  // namespace

std::vector<BatchNorm2d*> batch_norms_in(Layer& layer) {
  std::vector<BatchNorm2d*> out;
  if (auto* bn = dynamic_cast<BatchNorm2d*>(&layer)) out.push_back(bn);
  for (auto& [name, child] : layer.children()) {
    auto inner = batch_norms_in(*child);
    out.insert(out.end(), inner.begin(), inner.end());
  }
  return out;
}

BatchNorm2d::BatchNorm2d(int channels, double momentum, double eps) : channels_(channels) {
  PW_CHECK(channels > 0, "bad BatchNorm2d channel count " << channels);
  params_bn_ = {momentum, eps};
  weight_ = &add_parameter("weight", {channels}, Init::ones());
  bias_ = &add_parameter("bias", {channels}, Init::zeros());
  running_mean_ = &add_buffer("running_mean", {channels}, Init::zeros());
  running_var_ = &add_buffer("running_var", {channels}, Init::ones());
}

Shape BatchNorm2d::output_shape_impl(const Shape& input) const {
  PW_CHECK((input.size() == 4 || input.size() == 2) && input[1] == channels_,
           "BatchNorm2d(" << channels_ << ") expects [N, " << channels_ << ", H, W] or [N, " << channels_ << "], got "
                          << shape_str(input));
  return input;
}

Layer::Output BatchNorm2d::forward_impl(const Tensor& x, Mode mode) {
  if (group_sum_ && mode != Mode::Eval) return forward_synchronised(x, mode);
  auto ctx = std::make_unique<BatchNormContext>();
  ctx->mode = mode;
  Tensor y;
  if (mode != Mode::Eval) {
    ctx->save_mean = Tensor::empty({channels_}, kernels::DType::F32, x.device());
    ctx->save_invstd = Tensor::empty({channels_}, kernels::DType::F32, x.device());
    // A recompute must not move the running statistics a second time: update scratch copies.
    Tensor running_mean = mode == Mode::Recompute ? running_mean_->value.clone() : running_mean_->value;
    Tensor running_var = mode == Mode::Recompute ? running_var_->value.clone() : running_var_->value;
    y = kernels::batch_norm_forward_train(x, weight_->value, bias_->value, running_mean, running_var,
                                          ctx->save_mean, ctx->save_invstd, params_bn_);
    ctx->x = x;
  } else {
    y = kernels::batch_norm_forward_eval(x, weight_->value, bias_->value, running_mean_->value, running_var_->value,
                                         params_bn_);
  }
  return {std::move(y), std::move(ctx)};
}

// The group's statistics from per-channel sums the backward kernel computes (its bias gradient
// is the sum of its `grad_y`, its weight gradient the sum of grad_y * (x - mean) * invstd):
// first the mean, then the sum of squared deviations from it (no cancellation), then the
// normalisation itself as an evaluation-mode batch-norm with those statistics.
Layer::Output BatchNorm2d::forward_synchronised(const Tensor& x, Mode mode) {
  auto ctx = std::make_unique<BatchNormContext>();
  ctx->mode = mode;
  const auto device = x.device();
  const std::vector<double> zeros(static_cast<std::size_t>(channels_), 0.0), ones(zeros.size(), 1.0);
  const Tensor zero = on(zeros, device), one = on(ones, device);
  const double local = static_cast<double>(x.numel() / channels_);

  auto sums = kernels::batch_norm_backward(x, x, one, zero, one, params_bn_);   // grad_beta = sum of x
  std::vector<double> packed = host(sums.grad_beta);
  packed.push_back(local);
  Tensor shared = on(packed, device);
  group_sum_(shared);
  packed = host(shared);
  const double count = packed.back();
  std::vector<double> mean(zeros.size()), var(zeros.size());
  for (std::size_t c = 0; c < mean.size(); ++c) mean[c] = packed[c] / count;
  const Tensor mean_t = on(mean, device);
  // x - mean per channel, as an evaluation batch-norm with unit scale and variance 1 - eps.
  std::vector<double> unit_var(zeros.size(), 1.0 - params_bn_.eps);
  const Tensor centred = kernels::batch_norm_forward_eval(x, one, zero, mean_t, on(unit_var, device), params_bn_);
  auto squares = kernels::batch_norm_backward(x, centred, one, mean_t, one, params_bn_);   // sum of (x - mean)^2
  Tensor shared_squares = squares.grad_gamma;
  group_sum_(shared_squares);
  const auto m2 = host(shared_squares);
  std::vector<double> invstd(zeros.size());
  for (std::size_t c = 0; c < var.size(); ++c) {
    var[c] = m2[c] / count;
    invstd[c] = 1.0 / std::sqrt(var[c] + params_bn_.eps);
  }
  Tensor y = kernels::batch_norm_forward_eval(x, weight_->value, bias_->value, mean_t, on(var, device), params_bn_);
  if (mode == Mode::Train) {   // a recompute must not move the running statistics a second time
    auto rm = host(running_mean_->value), rv = host(running_var_->value);
    const double unbias = count > 1 ? count / (count - 1) : 1.0;
    for (std::size_t c = 0; c < rm.size(); ++c) {
      rm[c] = (1 - params_bn_.momentum) * rm[c] + params_bn_.momentum * mean[c];
      rv[c] = (1 - params_bn_.momentum) * rv[c] + params_bn_.momentum * var[c] * unbias;
    }
    running_mean_->value.copy_from(on(rm, device));
    running_var_->value.copy_from(on(rv, device));
  }
  ctx->x = x;
  ctx->save_mean = mean_t;
  ctx->save_invstd = on(invstd, device);
  ctx->local_count = local;
  ctx->group_count = count;
  return {std::move(y), std::move(ctx)};
}

// The kernel's input gradient uses this member's sums; the group's differ by a per-channel
// a + b * xhat, added as an evaluation batch-norm of x with scale b and shift a.
Tensor BatchNorm2d::backward_synchronised(Context& ctx, const Tensor& grad_y) {
  auto& c = static_cast<BatchNormContext&>(ctx);
  const auto device = c.x.device();
  auto grads = kernels::batch_norm_backward(c.x, grad_y, weight_->value, c.save_mean, c.save_invstd, params_bn_);
  const auto g1 = host(grads.grad_beta), g2 = host(grads.grad_gamma);
  std::vector<double> packed = g1;
  packed.insert(packed.end(), g2.begin(), g2.end());
  Tensor shared = on(packed, device);
  group_sum_(shared);
  const auto total = host(shared);
  const auto gamma = host(weight_->value), invstd = host(c.save_invstd);
  const std::size_t C = g1.size();
  std::vector<double> shift(C), scale(C), var(C);
  for (std::size_t k = 0; k < C; ++k) {
    const double f = gamma[k] * invstd[k];
    shift[k] = f * (g1[k] / c.local_count - total[k] / c.group_count);
    scale[k] = f * (g2[k] / c.local_count - total[C + k] / c.group_count);
    var[k] = 1.0 / (invstd[k] * invstd[k]) - params_bn_.eps;
  }
  const Tensor correction =
      kernels::batch_norm_forward_eval(c.x, on(scale, device), on(shift, device), c.save_mean, on(var, device), params_bn_);
  kernels::add_inplace(grads.grad_x, correction);
  c.grad_gamma = std::move(grads.grad_gamma);
  c.grad_beta = std::move(grads.grad_beta);
  c.x = Tensor();
  return std::move(grads.grad_x);
}

Tensor BatchNorm2d::backward_input_impl(Context& ctx, const Tensor& grad_y) {
  auto& c = static_cast<BatchNormContext&>(ctx);
  PW_CHECK(c.mode != Mode::Eval, "BatchNorm2d.backward after an eval-mode forward");
  if (c.group_count > 0) return backward_synchronised(ctx, grad_y);
  auto grads = kernels::batch_norm_backward(c.x, grad_y, weight_->value, c.save_mean, c.save_invstd, params_bn_);
  c.grad_gamma = std::move(grads.grad_gamma);
  c.grad_beta = std::move(grads.grad_beta);
  c.x = Tensor();
  return std::move(grads.grad_x);
}

void BatchNorm2d::backward_weight_impl(Context& ctx, const Tensor&) {
  auto& c = static_cast<BatchNormContext&>(ctx);
  kernels::add_inplace(weight_->grad, c.grad_gamma);
  kernels::add_inplace(bias_->grad, c.grad_beta);
  c.grad_gamma = Tensor();
  c.grad_beta = Tensor();
}

}  // namespace pw::models
