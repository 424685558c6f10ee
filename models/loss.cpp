#include "models/loss.h"

#include "kernels/ops/loss.h"

namespace pw::models {

LossResult softmax_cross_entropy(const kernels::Tensor& logits, const kernels::Tensor& labels, double grad_scale) {
  auto fwd = kernels::softmax_cross_entropy_forward(logits, labels);
  kernels::Tensor grad = kernels::softmax_cross_entropy_backward(fwd.probs, labels, grad_scale);
  return {fwd.loss, fwd.correct, std::move(grad)};
}

}  // namespace pw::models
