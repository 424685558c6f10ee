#pragma once
// Losses on a model's logits. `scale` multiplies the gradient: 1/N for the plain batch mean; a
// pipeline passes 1/(mini-batch size) so micro-batch gradients add up to the full-batch gradient.
#include "kernels/tensor.h"
#include "pipewright/loss.h"

namespace pw::models {

struct LossResult {
  double loss;            // mean over this batch
  std::int64_t correct;   // rows whose prediction is the label
  kernels::Tensor grad_logits;
};

// Softmax cross-entropy: logits [N, C], I64 labels [N]; `correct` counts arg-max hits.
LossResult softmax_cross_entropy(const kernels::Tensor& logits, const kernels::Tensor& labels, double grad_scale);

// Binary cross-entropy on one logit per row: logits [N, 1] or [N] (F32/F64), I64 labels [N] in {0, 1}.
// loss_i = max(z, 0) - z*y + log1p(exp(-|z|)) (no overflow for any z); dL/dz = (sigmoid(z) - y) * scale.
// `correct` counts rows where (z > 0) == y. Computed on the host: there is one value per row.
LossResult binary_cross_entropy_with_logits(const kernels::Tensor& logits, const kernels::Tensor& labels,
                                            double grad_scale);

// Which loss a model trains with (ModelSpec::objective).
enum class Objective { SoftmaxCrossEntropy, BinaryCrossEntropy };

// Rows of logits [N, C] whose label (I64 [N]) is among the k highest logits: fewer than k logits
// above the label's (ties count for the label, as a top-k that breaks them in its favour would).
std::int64_t top_k_hits(const kernels::Tensor& logits, const kernels::Tensor& labels, int k);
LossResult compute_loss(Objective objective, const kernels::Tensor& logits, const kernels::Tensor& labels,
                        double grad_scale);

// A program's loss (pipewright/loss.h) on the host: `loss` returns the gradient of the batch mean,
// which comes back multiplied by N * grad_scale in the logits' dtype and on their device.
// InputError when it returns a gradient of another size.
LossResult compute_loss(const LossFunction& loss, const kernels::Tensor& logits, const kernels::Tensor& labels,
                        double grad_scale);

// The loss a model trains with: a program's own when it has one, else `objective`.
struct Loss {
  Objective objective = Objective::SoftmaxCrossEntropy;
  LossFunction program;
};
LossResult compute_loss(const Loss& loss, const kernels::Tensor& logits, const kernels::Tensor& labels,
                        double grad_scale);

}  // namespace pw::models
