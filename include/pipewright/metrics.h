#pragma once
// What an evaluation measured.
#include <cstdint>

namespace pw::models {

struct EvalResult {
  double loss = 0.0;   // mean over samples
  double accuracy = 0.0;
  // Rows whose label is among the 5 highest logits (all of them when there are 5 classes or
  // fewer); -1 where there are no class logits to rank (binary objective, a program's loss).
  double top5_accuracy = -1.0;
  std::int64_t samples = 0;
  double auc = -1.0;   // binary cross-entropy (one logit) only: ROC AUC of the logits
};

}  // namespace pw::models
