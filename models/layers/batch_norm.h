#pragma once
#include "kernels/ops/batch_norm.h"
#include "models/layer.h"

namespace pw::models {

// Batch normalisation over [N, C, H, W] or [N, C]; running statistics as buffers
// running_mean / running_var (PyTorch's names and momentum convention).
class BatchNorm2d : public Layer {
 public:
  explicit BatchNorm2d(int channels, double momentum = 0.1, double eps = 1e-5);
  std::string type_name() const override { return "BatchNorm2d"; }

 protected:
  Output forward_impl(const Tensor& x, Mode mode) override;
  Tensor backward_input_impl(Context& ctx, const Tensor& grad_y) override;
  void backward_weight_impl(Context& ctx, const Tensor& grad_y) override;
  Shape output_shape_impl(const Shape& input) const override;

 private:
  int channels_;
  kernels::BatchNormParams params_bn_;
  Parameter* weight_;
  Parameter* bias_;
  Buffer* running_mean_;
  Buffer* running_var_;
};

}  // namespace pw::models
