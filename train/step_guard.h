#pragma once
// The engine's answer to the executor's UpdateCheck (pipeline/update_check.h): every rank of the
// job reports whether its loss and gradients are finite and its share of the squared gradient
// norm, all ranks exchange the two figures in the same step (Zero Bubble's optimizer
// post-validation), and each decides alike: skip the step everywhere when anything is not finite,
// otherwise scale the gradients so the whole model's norm is at most `clip_norm`. Gradients of rows
// on parameter servers are checked and scaled too, and counted in the norm when each stage's
// replica 0 reports the squared norm of what the servers apply (with one replica, its own rows;
// with more, the replicas' rows summed by key: RemoteRowsRegistry::set_replica_exchange). With
// sharded optimizer state each replica reports the squares of the gradient slices it owns, and
// those are summed over every rank.
#include <cstdint>
#include <functional>
#include <vector>

#include "pipeline/update_check.h"

namespace pw::train {

// Whether the figures ranks report for their rows on parameter servers are those the servers apply
// (one replica, or replicas that exchanged their rows), which then count in the norm, or only each
// replica's own part of them, which is then left out of it (checked for finiteness all the same).
enum class ServerRowsInNorm { Counted, LeftOut };

class StepGuard : public pipeline::UpdateCheck {
 public:
  // Sends `values` to every rank and returns every rank's, indexed by rank (round = the step).
  using Exchange = std::function<std::vector<std::vector<double>>(const std::vector<double>& values, std::int64_t round)>;
  // `stages`: ranks 0..stages-1 are replica 0, whose figures make up the model's norm.
  StepGuard(int rank, int stages, double clip_norm, ServerRowsInNorm server_rows, Exchange exchange);

  pipeline::UpdateDecision before_update(std::int64_t step, const pipeline::GradientShare& counted,
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
  ServerRowsInNorm server_rows_;
  Exchange exchange_;
  double loss_scale_ = 1.0;
  int nonfinite_rank_ = -1;
  bool loss_finite_ = true;
  double norm_ = 0.0;
};

}  // namespace pw::train
