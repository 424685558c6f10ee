#include "kernels/ops/loss.h"

#include "kernels/dispatch.h"
#include "kernels/ops/validate.h"

namespace pw::kernels {

namespace {

Device check_logits_and_labels(const char* op, const detail::Arg& scores, const Tensor& labels) {
  detail::check_ndim(op, scores, 2, "[N, C]");
  detail::check_full_precision(op, scores);
  detail::check_ndim(op, {labels, "labels"}, 1, "[N]");
  detail::check_dtype_is(op, {labels, "labels"}, DType::I64);
  PW_CHECK(labels.dim(0) == scores.tensor.dim(0), "" << op << ": labels " << labels.describe() << " do not match "
                                                     << scores.name << " " << scores.tensor.describe());
  PW_CHECK(scores.tensor.dim(1) >= 1, "" << op << ": " << scores.name << " has no classes: " << scores.tensor.describe());
  return detail::check_same_device(op, {scores, {labels, "labels"}});
}

}  // namespace

CrossEntropyResult softmax_cross_entropy_forward(const Tensor& logits, const Tensor& labels) {
  constexpr const char* op = "softmax_cross_entropy_forward";
  const Device device = check_logits_and_labels(op, {logits, "logits"}, labels);
  PW_CHECK(logits.dim(0) >= 1, "" << op << ": empty batch " << logits.describe());
  return PW_DISPATCH(device, softmax_cross_entropy_forward, logits, labels);
}

Tensor softmax_cross_entropy_backward(const Tensor& probs, const Tensor& labels, double scale) {
  const Device device = check_logits_and_labels("softmax_cross_entropy_backward", {probs, "probs"}, labels);
  return PW_DISPATCH(device, softmax_cross_entropy_backward, probs, labels, scale);
}

}  // namespace pw::kernels
