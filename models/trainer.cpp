#include "models/trainer.h"

#include "models/loss.h"

namespace pw::models {

Trainer::Trainer(Sequential& model, Optimizer& optimizer, Device device)
    : model_(model), optimizer_(optimizer), device_(device) {}

StepResult Trainer::train_step(const data::Batch& batch) {
  const Tensor x = batch.images.to(device_);
  const Tensor labels = batch.labels.to(device_);
  optimizer_.zero_grad();
  auto out = model_.forward(x, Mode::Train);
  const auto n = x.dim(0);
  auto loss = softmax_cross_entropy(out.y, labels, 1.0 / static_cast<double>(n));
  model_.backward(*out.ctx, loss.grad_logits);
  optimizer_.step();
  return {loss.loss, loss.correct, n};
}

EvalResult Trainer::evaluate(data::DataLoader& loader, std::int64_t max_batches) {
  return evaluate_classifier(loader, max_batches,
                             [this](const Tensor& images) { return model_.forward(images.to(device_), Mode::Eval).y; });
}

EvalResult evaluate_classifier(data::DataLoader& loader, std::int64_t max_batches,
                               const std::function<Tensor(const Tensor&)>& logits_of) {
  EvalResult r;
  double loss_sum = 0.0;
  std::int64_t correct = 0;
  loader.start_epoch(0);
  std::int64_t batches = 0;
  while (auto batch = loader.next()) {
    if (max_batches >= 0 && batches++ >= max_batches) break;
    const Tensor logits = logits_of(batch->images);
    const Tensor labels = batch->labels.to(logits.device());
    auto loss = softmax_cross_entropy(logits, labels, 1.0);
    const auto n = labels.numel();
    loss_sum += loss.loss * static_cast<double>(n);
    correct += loss.correct;
    r.samples += n;
  }
  if (r.samples > 0) {
    r.loss = loss_sum / static_cast<double>(r.samples);
    r.accuracy = static_cast<double>(correct) / static_cast<double>(r.samples);
  }
  return r;
}

}  // namespace pw::models
