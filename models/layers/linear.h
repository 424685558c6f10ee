#pragma once
#include "models/layer.h"

namespace pw::models {

// y = x W^T + b over [N, in] inputs; PyTorch's default initialisation.
class Linear : public Layer {
 public:
  Linear(int in_features, int out_features, Bias bias = Bias::Yes, WeightInit init = WeightInit::TorchDefault);
  std::string type_name() const override { return "Linear"; }
  InputRounding input_rounding() const override { return InputRounding::ToActivationDtype; }

 protected:
  Output forward_impl(const Tensor& x, Mode mode) override;
  Tensor backward_input_impl(Context& ctx, const Tensor& grad_y) override;
  void backward_weight_impl(Context& ctx, const Tensor& grad_y) override;
  Shape output_shape_impl(const Shape& input) const override;
  std::vector<Parameter*> compute_copied_parameters() override { return {weight_}; }

 private:
  int in_features_, out_features_;
  Parameter* weight_;
  Parameter* bias_ = nullptr;
};

}  // namespace pw::models
