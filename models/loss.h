#pragma once
// Softmax cross-entropy on a model's logits. `scale` multiplies the gradient: 1/N for the plain
// batch mean; a pipeline passes 1/(mini-batch size) so micro-batch gradients add up to the
// full-batch gradient.
#include "kernels/tensor.h"

namespace pw::models {

struct LossResult {
  double loss;            // mean over this batch
  std::int64_t correct;   // rows whose arg-max is the label
  kernels::Tensor grad_logits;
};

LossResult softmax_cross_entropy(const kernels::Tensor& logits, const kernels::Tensor& labels, double grad_scale);

}  // namespace pw::models
