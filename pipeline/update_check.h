#pragma once
// A job-wide verdict on each optimizer step, taken after the gradients are final: whether the
// step's loss and gradients are finite everywhere (a non-finite step is skipped by every rank) and
// by how much to scale the gradients (clipping by the norm of the whole model, over every stage
// and replica). The executor asks; the job engine answers.
//
// The asking is split in two so that a stage can update before the answer comes (post-validation,
// UpdateValidation::After): `report` sends this stage's figures and returns at once with the
// provisional decision, `verdict` waits for every rank's figures. A stage validating before its
// update calls both back to back; one validating after it updates with the provisional decision in
// between and undoes that update when the verdict differs.
#include <cstdint>
#include <vector>

#include "models/layer.h"
#include "models/optimizer.h"
#include "pipewright/enums.h"

namespace pw::pipeline {

enum class UpdateAction { Apply, Skip };

struct UpdateDecision {
  UpdateAction action = UpdateAction::Apply;
  double gradient_scale = 1.0;   // applied to every gradient before the update

  bool operator==(const UpdateDecision&) const = default;
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
  // Called by every stage of every replica once per step, before `verdict`; does not wait for
  // other ranks. `counted`: this stage's share of the model's gradient norm; `remote_squares`: the sum of squares of
  // the gradients it sends to parameter servers (RemoteRowsSync::gradient_sum_of_squares);
  // `loss_sum`: this stage's summed loss (0 where no loss is computed).
  // Returns the decision the verdict will be when every rank is finite and nothing clips (Skip
  // when this stage's own figures are not finite: the verdict will be Skip).
  virtual UpdateDecision report(std::int64_t step, const GradientShare& counted,
                                double remote_squares, double loss_sum) = 0;
  // Waits (up to a deadline) for every rank's figures of `step` and returns the job's decision,
  // the same on every rank.
  virtual UpdateDecision verdict(std::int64_t step) = 0;
};

// Whether `kind` updates before its step's verdict by default (UpdateValidation::Auto): the
// zero-bubble schedules, whose point is that no stage waits at the step's end.
bool post_validates(ScheduleKind kind);
// `chosen`, with Auto resolved by `kind` and where the optimizer state lives: offloaded to the
// host, Auto waits for the verdict whatever the schedule. Updating before it would save the whole
// host state (weights, masters, moments) for the undo every step: for VGG-16 at width 32 (4 M
// parameters) on two ZB-H1 stages the steps took 71-78 ms that way against 68-69 ms waiting.
UpdateValidation resolve_update_validation(UpdateValidation chosen, ScheduleKind kind,
                                           models::OptimizerOffload offload);

}  // namespace pw::pipeline
