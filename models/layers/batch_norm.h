#pragma once
#include <functional>

#include "kernels/ops/batch_norm.h"
#include "models/layer.h"

namespace pw::models {

// Batch normalisation over [N, C, H, W] or [N, C]; running statistics as buffers
// running_mean / running_var (PyTorch's names and momentum convention).
class BatchNorm2d : public Layer {
 public:
  // Sums a flat F32 tensor over every member of the layer's replica group, in place.
  using GroupSum = std::function<void(Tensor& values)>;

  explicit BatchNorm2d(int channels, double momentum = 0.1, double eps = 1e-5);
  std::string type_name() const override { return "BatchNorm2d"; }

  // Synchronised batch-norm (torch's SyncBatchNorm): training statistics over the samples of
  // every member of the group (each calls forward and backward in the same order), and the input
  // gradient from the group's sums; parameter gradients stay local (the gradient all-reduce
  // averages them). Empty: local statistics.
  void set_group_sum(GroupSum sum) { group_sum_ = std::move(sum); }

 protected:
  Output forward_impl(const Tensor& x, Mode mode) override;
  Tensor backward_input_impl(Context& ctx, const Tensor& grad_y) override;
  Output forward_synchronised(const Tensor& x, Mode mode);
  Tensor backward_synchronised(Context& ctx, const Tensor& grad_y);
  void backward_weight_impl(Context& ctx, const Tensor& grad_y) override;
  Shape output_shape_impl(const Shape& input) const override;

 private:
  int channels_;
  kernels::BatchNormParams params_bn_;
  Parameter* weight_;
  Parameter* bias_;
  Buffer* running_mean_;
  Buffer* running_var_;
  GroupSum group_sum_;
};

// Every BatchNorm2d inside `layer` (itself included).
std::vector<BatchNorm2d*> batch_norms_in(Layer& layer);

}  // namespace pw::models
