#pragma once
#include "kernels/ops/conv2d.h"
#include "models/layer.h"

namespace pw::models {

// 2-D convolution; PyTorch's default initialisation (uniform in ±1/sqrt(fan_in)).
class Conv2d : public Layer {
 public:
  Conv2d(int in_channels, int out_channels, int kernel, int stride = 1, int padding = 0, Bias bias = Bias::Yes,
         WeightInit init = WeightInit::TorchDefault);
  std::string type_name() const override { return "Conv2d"; }
  InputRounding input_rounding() const override { return InputRounding::ToActivationDtype; }

 protected:
  Output forward_impl(const Tensor& x, Mode mode) override;
  Tensor backward_input_impl(Context& ctx, const Tensor& grad_y) override;
  void backward_weight_impl(Context& ctx, const Tensor& grad_y) override;
  Shape output_shape_impl(const Shape& input) const override;
  std::vector<Parameter*> compute_copied_parameters() override { return {weight_}; }

 private:
  int in_channels_, out_channels_, kernel_;
  kernels::Conv2dParams params_conv_;
  Parameter* weight_;
  Parameter* bias_ = nullptr;
};

}  // namespace pw::models
