#include "models/layers/batch_norm.h"

#include "kernels/ops/elementwise.h"

namespace pw::models {
namespace {
struct BatchNormContext : Context {
  Mode mode = Mode::Train;
  Tensor x, save_mean, save_invstd;
  Tensor grad_gamma, grad_beta;   // computed with the input gradient, added in the weight half
};
}  // namespace

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

Tensor BatchNorm2d::backward_input_impl(Context& ctx, const Tensor& grad_y) {
  auto& c = static_cast<BatchNormContext&>(ctx);
  PW_CHECK(c.mode != Mode::Eval, "BatchNorm2d.backward after an eval-mode forward");
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
