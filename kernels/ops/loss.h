#pragma once
// Softmax cross-entropy over logits [N, C] with integer labels [N] (I64), mean over the batch.
#include "kernels/tensor.h"

namespace pw::kernels {

struct CrossEntropyResult {
  double loss;      // mean over the batch
  Tensor probs;     // softmax probabilities [N, C], what backward needs
  std::int64_t correct;   // how many rows have argmax == label
};
CrossEntropyResult softmax_cross_entropy_forward(const Tensor& logits, const Tensor& labels);
// grad_logits = (probs - onehot(labels)) * scale; scale is 1/N for the plain mean loss.
Tensor softmax_cross_entropy_backward(const Tensor& probs, const Tensor& labels, double scale);

}  // namespace pw::kernels
