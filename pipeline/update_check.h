#pragma once
// A job-wide verdict on each optimizer step, taken after the gradients are final and before any
// rank updates: whether the step's loss and gradients are finite everywhere (a non-finite step is
// skipped by every rank) and by how much to scale the gradients (clipping by the norm of the
// whole model, over every stage and replica). The executor asks; the job engine answers.
#include <cstdint>
#include <vector>

#include "models/layer.h"
#include "models/optimizer.h"

namespace pw::pipeline {

enum class UpdateAction { Apply, Skip };

struct UpdateDecision {
  UpdateAction action = UpdateAction::Apply;
  double gradient_scale = 1.0;   // applied to every gradient before the update
};

// A stage's gradients that make up its share of the model's norm: `whole` parameters, which every
// replica holds reduced (counted on replica 0 only; a tied weight on its first owner only), and
// `owned` slices of sharded parameters, each held reduced by one replica only (counted on each).
struct GradientShare {
  std::vector<models::Parameter*> whole;
  std::vector<models::ParameterSlice> owned;
};

class UpdateCheck {
 public:
  virtual ~UpdateCheck() = default;
  // Called by every stage of every replica once per step. `counted`: this stage's share of the
  // model's gradient norm; `remote_squares`: the sum of squares of the gradients it sends to parameter servers
  // (RemoteRowsSync::gradient_sum_of_squares);
  // `loss_sum`: this stage's summed loss (0 where no loss is computed).
  virtual UpdateDecision before_update(std::int64_t step, const GradientShare& counted,
                                       double remote_squares, double loss_sum) = 0;
};

}  // namespace pw::pipeline
