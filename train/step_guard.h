#pragma once
// The engine's answer to the executor's UpdateCheck (pipeline/update_check.h): every rank of the
// job reports whether its loss and gradients are finite and its share of the squared gradient
// norm, all ranks exchange the two figures in the same step (Zero Bubble's optimizer
// post-validation), and each decides alike: skip the step everywhere when anything is not finite,
// otherwise scale the gradients so the whole model's norm is at most `clip_norm`. Gradients of rows
// on parameter servers are checked and scaled too, and counted in the norm with one replica (with
// more, their sum over replicas is formed on the servers, not here).
#include <cstdint>
#include <functional>
#include <vector>

#include "pipeline/update_check.h"

namespace pw::train {

class StepGuard : public pipeline::UpdateCheck {
 public:
  // Sends `values` to every rank and returns every rank's, indexed by rank (round = the step).
  using Exchange = std::function<std::vector<std::vector<double>>(const std::vector<double>& values, std::int64_t round)>;
  // `stages`: ranks 0..stages-1 are replica 0, whose figures make up the model's norm.
  StepGuard(int rank, int stages, double clip_norm, Exchange exchange);

  pipeline::UpdateDecision before_update(std::int64_t step, const std::vector<models::Parameter*>& counted,
                                         double remote_squares, double loss_sum) override;
  // fp16 loss scaling: the gradients arrive multiplied by `scale`; the norm is reported, clipped
  // and the update made on the unscaled gradients (the decision's gradient_scale divides by it).
  void set_loss_scale(double scale) { loss_scale_ = scale; }
  int last_nonfinite_rank() const { return nonfinite_rank_; }   // the lowest; -1 when finite
  bool last_loss_finite() const { return loss_finite_; }         // every rank's loss was finite
  double last_gradient_norm() const { return norm_; }            // before clipping

 private:
  int rank_;
  int stages_;
  double clip_norm_;
  Exchange exchange_;
  double loss_scale_ = 1.0;
  int nonfinite_rank_ = -1;
  bool loss_finite_ = true;
  double norm_ = 0.0;
};

}  // namespace pw::train
