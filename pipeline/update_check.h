#pragma once
// A job-wide verdict on each optimizer step, taken after the gradients are final and before any
// rank updates: whether the step's loss and gradients are finite everywhere (a non-finite step is
// skipped by every rank) and by how much to scale the gradients (clipping by the norm of the
// whole model, over every stage and replica). The executor asks; the job engine answers.
#include <cstdint>
#include <vector>

#include "models/layer.h"

namespace pw::pipeline {

enum class UpdateAction { Apply, Skip };

struct UpdateDecision {
  UpdateAction action = UpdateAction::Apply;
  double gradient_scale = 1.0;   // applied to every gradient before the update
};

class UpdateCheck {
 public:
  virtual ~UpdateCheck() = default;
  // Called by every stage of every replica once per step. `counted`: this stage's parameters
  // whose gradients make up its share of the model's norm (a tied weight on its first owner only);
  // `remote_squares`: the sum of squares of the gradients it sends to parameter servers
  // (RemoteRowsSync::gradient_sum_of_squares);
  // `loss_sum`: this stage's summed loss (0 where no loss is computed).
  virtual UpdateDecision before_update(std::int64_t step, const std::vector<models::Parameter*>& counted,
                                       double remote_squares, double loss_sum) = 0;
};

}  // namespace pw::pipeline
