#include "models/layers/linear.h"

#include <cmath>

#include "kernels/ops/linear.h"

namespace pw::models {
namespace {
struct LinearContext : Context {
  Tensor x;
};
}  // namespace

Linear::Linear(int in_features, int out_features, Bias bias, WeightInit init) : in_features_(in_features), out_features_(out_features) {
  PW_CHECK(in_features > 0 && out_features > 0, "bad Linear configuration " << in_features << "->" << out_features);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  const Init weight_init = init == WeightInit::GlorotUniform
                               ? Init::uniform(std::sqrt(6.0 / (static_cast<double>(in_features) + out_features)))
                               : Init::uniform(bound);
  const Init bias_init = init == WeightInit::GlorotUniform ? Init::zeros() : Init::uniform(bound);
  weight_ = &add_parameter("weight", {out_features, in_features}, weight_init);
  if (bias == Bias::Yes) bias_ = &add_parameter("bias", {out_features}, bias_init);
}

Shape Linear::output_shape_impl(const Shape& input) const {
  PW_CHECK(input.size() == 2 && input[1] == in_features_,
           "Linear(" << in_features_ << "->" << out_features_ << ") expects [N, " << in_features_ << "], got "
                     << shape_str(input));
  return {input[0], out_features_};
}

Layer::Output Linear::forward_impl(const Tensor& x, Mode) {
  auto ctx = std::make_unique<LinearContext>();
  ctx->x = as_compute_dtype(x);
  Tensor y = kernels::linear_forward(ctx->x, compute_weight(*weight_), bias_ ? bias_->value : Tensor());
  return {std::move(y), std::move(ctx)};
}

Tensor Linear::backward_input_impl(Context&, const Tensor& grad_y) {
  return kernels::linear_backward_data(grad_y, compute_weight(*weight_));
}

void Linear::backward_weight_impl(Context& ctx, const Tensor& grad_y) {
  auto& c = static_cast<LinearContext&>(ctx);
  Tensor no_bias;
  kernels::linear_backward_weight(c.x, grad_y, weight_->grad, bias_ ? bias_->grad : no_bias);
  c.x = Tensor();
}

}  // namespace pw::models
