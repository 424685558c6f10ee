#include "models/loss.h"

#include <cmath>
#include <vector>

#include "core/error.h"
#include "kernels/ops/half_support.h"
#include "kernels/ops/loss.h"

namespace pw::models {

LossResult softmax_cross_entropy(const kernels::Tensor& logits, const kernels::Tensor& labels, double grad_scale) {
  auto fwd = kernels::softmax_cross_entropy_forward(logits, labels);
  kernels::Tensor grad = kernels::softmax_cross_entropy_backward(fwd.probs, labels, grad_scale);
  return {fwd.loss, fwd.correct, std::move(grad)};
}

LossResult binary_cross_entropy_with_logits(const kernels::Tensor& logits, const kernels::Tensor& labels,
                                            double grad_scale) {
  using kernels::DType;
  const bool column = logits.ndim() == 2 && logits.dim(1) == 1;
  PW_CHECK((logits.ndim() == 1 || column) && (logits.dtype() == DType::F32 || logits.dtype() == DType::F64),
           "binary_cross_entropy_with_logits: logits must be F32/F64 [N, 1] or [N], got " << logits.describe());
  PW_CHECK(labels.ndim() == 1 && labels.dtype() == DType::I64 && labels.dim(0) == logits.dim(0),
           "binary_cross_entropy_with_logits: labels " << labels.describe() << " do not match logits "
                                                       << logits.describe());
  const std::int64_t n = logits.dim(0);
  PW_CHECK(n >= 1, "binary_cross_entropy_with_logits: empty batch " << logits.describe());
  const std::vector<double> z = logits.to_double_vector();
  const std::vector<std::int64_t> y = labels.to_int_vector();
  std::vector<double> grad(z.size());
  double total = 0.0;
  std::int64_t correct = 0;
  for (std::size_t i = 0; i < z.size(); ++i) {
    PW_INPUT_CHECK(y[i] == 0 || y[i] == 1, "binary cross-entropy label " << y[i] << " at row " << i
                                                                          << "; expected 0 or 1");
    const double t = static_cast<double>(y[i]);
    total += std::max(z[i], 0.0) - z[i] * t + std::log1p(std::exp(-std::abs(z[i])));
    // sigmoid without overflow on either side
    const double e = std::exp(-std::abs(z[i]));
    const double p = z[i] >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
    grad[i] = (p - t) * grad_scale;
    correct += (z[i] > 0) == (y[i] == 1) ? 1 : 0;
  }
  kernels::Tensor g = kernels::Tensor::from_vector(grad, logits.shape(), kernels::Device::cpu());
  if (logits.dtype() == DType::F32) g = g.to(DType::F32);
  return {total / static_cast<double>(n), correct, g.to(logits.device())};
}

LossResult compute_loss(Objective objective, const kernels::Tensor& logits, const kernels::Tensor& labels,
                        double grad_scale) {
  // Losses run in F32 whatever the model's precision; the gradient goes back in F32 and the
  // last layer's backward converts it to the dtype it produced.
  const kernels::Tensor wide = kernels::is_half(logits.dtype()) ? logits.to(kernels::DType::F32) : logits;
  return objective == Objective::BinaryCrossEntropy ? binary_cross_entropy_with_logits(wide, labels, grad_scale)
                                                    : softmax_cross_entropy(wide, labels, grad_scale);
}

}  // namespace pw::models

namespace pw::models {

LossResult compute_loss(const LossFunction& loss, const kernels::Tensor& logits, const kernels::Tensor& labels,
                        double grad_scale) {
  PW_CHECK(logits.ndim() >= 1 && labels.numel() == logits.shape()[0],
           "loss: " << logits.describe() << " outputs for " << labels.describe() << " labels");
  const auto outputs = logits.to_float_vector();
  const auto host_labels = labels.to_int_vector();
  LossInput in{logits.shape(), outputs.data(), host_labels.data()};
  LossValue value = loss(in);
  PW_INPUT_CHECK(value.grad.size() == outputs.size(),
                 "the program's loss returned " << value.grad.size() << " gradient values for outputs of shape "
                                                << kernels::shape_str(logits.shape()) << "; expected " << outputs.size()
                                                << " (one per output)");
  const double scale = grad_scale * static_cast<double>(labels.numel());
  for (auto& g : value.grad) g = static_cast<float>(static_cast<double>(g) * scale);
  auto grad = kernels::Tensor::from_vector(value.grad, logits.shape()).to(logits.dtype()).to(logits.device());
  return {value.loss, value.correct, std::move(grad)};
}

LossResult compute_loss(const Loss& loss, const kernels::Tensor& logits, const kernels::Tensor& labels,
                        double grad_scale) {
  if (loss.program) return compute_loss(loss.program, logits, labels, grad_scale);
  return compute_loss(loss.objective, logits, labels, grad_scale);
}

std::int64_t top_k_hits(const kernels::Tensor& logits, const kernels::Tensor& labels, int k) {
  PW_CHECK(logits.ndim() == 2 && labels.ndim() == 1 && labels.dim(0) == logits.dim(0),
           "top_k_hits: logits " << logits.describe() << " and labels " << labels.describe() << " do not match");
  const auto z = logits.to_double_vector();
  const auto y = labels.to_int_vector();
  const auto classes = static_cast<std::size_t>(logits.dim(1));
  std::int64_t hits = 0;
  for (std::size_t row = 0; row < y.size(); ++row) {
    const double* r = z.data() + row * classes;
    PW_CHECK(y[row] >= 0 && static_cast<std::size_t>(y[row]) < classes,
             "top_k_hits: label " << y[row] << " outside the " << classes << " classes");
    const double mine = r[y[row]];
    if (!std::isfinite(mine)) continue;   // a diverged model's NaN is no hit
    int above = 0;
    for (std::size_t c = 0; c < classes; ++c) above += r[c] > mine ? 1 : 0;
    hits += above < k ? 1 : 0;
  }
  return hits;
}

}  // namespace pw::models
