#include "models/layers/conv2d.h"

#include <cmath>

namespace pw::models {
namespace {
struct Conv2dContext : Context {
  Tensor x;
};
}  // namespace

Conv2d::Conv2d(int in_channels, int out_channels, int kernel, int stride, int padding, Bias bias, WeightInit init)
    : in_channels_(in_channels), out_channels_(out_channels), kernel_(kernel) {
  PW_CHECK(in_channels > 0 && out_channels > 0 && kernel > 0 && stride > 0 && padding >= 0, "bad Conv2d configuration");
  params_conv_ = {stride, stride, padding, padding};
  const double fan_in = static_cast<double>(in_channels) * kernel * kernel;
  const double fan_out = static_cast<double>(out_channels) * kernel * kernel;
  const double bound = 1.0 / std::sqrt(fan_in);
  const Init weight_init = init == WeightInit::GlorotUniform ? Init::uniform(std::sqrt(6.0 / (fan_in + fan_out)))
                                                             : Init::uniform(bound);
  const Init bias_init = init == WeightInit::GlorotUniform ? Init::zeros() : Init::uniform(bound);
  weight_ = &add_parameter("weight", {out_channels, in_channels, kernel, kernel}, weight_init);
  if (bias == Bias::Yes) bias_ = &add_parameter("bias", {out_channels}, bias_init);
}

Shape Conv2d::output_shape_impl(const Shape& input) const {
  PW_CHECK(input.size() == 4 && input[1] == in_channels_,
           "Conv2d(" << in_channels_ << "->" << out_channels_ << ") expects [N, " << in_channels_ << ", H, W], got "
                     << shape_str(input));
  return kernels::conv2d_output_shape(input, weight_->value.shape(), params_conv_);
}

Layer::Output Conv2d::forward_impl(const Tensor& x, Mode) {
  auto ctx = std::make_unique<Conv2dContext>();
  ctx->x = as_compute_dtype(x);
  Tensor y = kernels::conv2d_forward(ctx->x, compute_weight(*weight_), bias_ ? bias_->value : Tensor(), params_conv_);
  return {std::move(y), std::move(ctx)};
}

Tensor Conv2d::backward_input_impl(Context& ctx, const Tensor& grad_y) {
  return kernels::conv2d_backward_data(grad_y, compute_weight(*weight_), ctx.input_shape, params_conv_);
}

void Conv2d::backward_weight_impl(Context& ctx, const Tensor& grad_y) {
  auto& c = static_cast<Conv2dContext&>(ctx);
  Tensor no_bias;
  kernels::conv2d_backward_filter(c.x, grad_y, weight_->grad, bias_ ? bias_->grad : no_bias, params_conv_);
  c.x = Tensor();
}

}  // namespace pw::models
