#include "models/trainer.h"

#include <algorithm>

#include "models/loss.h"
#include "models/metrics.h"

namespace pw::models {

Trainer::Trainer(Sequential& model, Optimizer& optimizer, Device device, Objective objective)
    : model_(model), optimizer_(optimizer), device_(device), objective_(objective) {}

StepResult Trainer::train_step(const data::Batch& batch) {
  const Tensor x = batch.images.to(device_);
  const Tensor labels = batch.labels.to(device_);
  optimizer_.zero_grad();
  auto out = model_.forward(x, Mode::Train);
  const auto n = x.dim(0);
  auto loss = compute_loss(objective_, out.y, labels, 1.0 / static_cast<double>(n));
  model_.backward(*out.ctx, loss.grad_logits);
  optimizer_.step();
  return {loss.loss, loss.correct, n};
}

EvalResult Trainer::evaluate(data::DataLoader& loader, std::int64_t max_batches) {
  return evaluate_classifier(loader, max_batches,
                             [this](const Tensor& images) { return model_.forward(images.to(device_), Mode::Eval).y; },
                             objective_);
}

EvalResult evaluate_classifier(data::DataLoader& loader, std::int64_t max_batches,
                               const std::function<Tensor(const Tensor&)>& logits_of, Objective objective) {
  EvalResult r;
  double loss_sum = 0.0;
  std::int64_t correct = 0;
  std::vector<double> scores;
  std::vector<std::int64_t> score_labels;
  loader.start_epoch(0);
  std::int64_t batches = 0;
  while (auto batch = loader.next()) {
    if (max_batches >= 0 && batches++ >= max_batches) break;
    const Tensor logits = logits_of(batch->images);
    const Tensor labels = batch->labels.to(logits.device());
    auto loss = compute_loss(objective, logits, labels, 1.0);
    if (objective == Objective::BinaryCrossEntropy) {
      const auto z = logits.to_double_vector();
      const auto y = labels.to_int_vector();
      scores.insert(scores.end(), z.begin(), z.end());
      score_labels.insert(score_labels.end(), y.begin(), y.end());
    }
    const auto n = labels.numel();
    loss_sum += loss.loss * static_cast<double>(n);
    correct += loss.correct;
    r.samples += n;
  }
  if (r.samples > 0) {
    r.loss = loss_sum / static_cast<double>(r.samples);
    r.accuracy = static_cast<double>(correct) / static_cast<double>(r.samples);
  }
  if (objective == Objective::BinaryCrossEntropy) {
    const auto positives = std::count(score_labels.begin(), score_labels.end(), std::int64_t{1});
    const bool both = positives > 0 && positives < static_cast<std::int64_t>(score_labels.size());
    r.auc = both ? roc_auc(scores, score_labels) : -1.0;
  }
  return r;
}

}  // namespace pw::models
