#pragma once
// Single-device training and evaluation of a Sequential model with softmax cross-entropy, or
// binary cross-entropy on one logit (click models, which also report the test AUC).
#include <cstdint>
#include <functional>

#include "pipewright/metrics.h"
#include "models/data/data_loader.h"
#include "models/layers/sequential.h"
#include "models/loss.h"
#include "models/optimizer.h"

namespace pw::models {

struct StepResult {
  double loss = 0.0;
  std::int64_t correct = 0;
  std::int64_t samples = 0;
};

// EvalResult: pipewright/metrics.h.

// Scores `logits_of` (CPU images -> logits on any device) over the loader's batches in order.
EvalResult evaluate_classifier(data::DataLoader& loader, std::int64_t max_batches,
                               const std::function<Tensor(const Tensor&)>& logits_of,
                               Objective objective = Objective::SoftmaxCrossEntropy);

class Trainer {
 public:
  Trainer(Sequential& model, Optimizer& optimizer, Device device,
          Objective objective = Objective::SoftmaxCrossEntropy);
  // Forward, loss, backward, one optimizer step.
  StepResult train_step(const data::Batch& batch);
  EvalResult evaluate(data::DataLoader& loader, std::int64_t max_batches = -1);

 private:
  Sequential& model_;
  Optimizer& optimizer_;
  Device device_;
  Objective objective_;
};

}  // namespace pw::models
