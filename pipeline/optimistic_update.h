#pragma once
// Post-validation's undo (UpdateValidation::After, pipeline/update_check.h): a stage updates with
// the provisional decision before the job's verdict arrives, having saved what the update changes,
// and restores it bit for bit when the verdict is another (skip, or clip). Gradients are saved
// only when the provisional update scales them in place (fp16 loss scaling): a clipped redo must
// scale the unscaled gradients once, as a stage that waited for the verdict does.
#include <optional>
#include <vector>

#include "models/optimizer.h"

namespace pw::pipeline {

// Scales `params`' gradients by `gradient_scale` (unless 1) and makes one optimizer step: the
// dense part of every stage's update, whichever way it is validated.
void update_dense(models::Optimizer& optimizer, const std::vector<models::Parameter*>& params, double gradient_scale);

class OptimisticUpdate {
 public:
  // Saves the optimizer's values, state and step count (and the gradients, when `gradient_scale`
  // is not 1), then makes the update (update_dense).
  void apply(models::Optimizer& optimizer, const std::vector<models::Parameter*>& params, double gradient_scale);
  // The verdict matched: the saved copies are let go.
  void keep();
  // The verdict differs: the optimizer and the gradients are put back as they were before apply.
  void undo(models::Optimizer& optimizer, const std::vector<models::Parameter*>& params);
  bool pending() const { return saved_.has_value(); }

 private:
  std::optional<models::OptimizerSnapshot> saved_;
  std::vector<kernels::Tensor> gradients_;   // empty when the update did not scale them
};

}  // namespace pw::pipeline
