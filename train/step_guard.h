#pragma once
// The engine's answer to the executor's UpdateCheck (pipeline/update_check.h): every rank of the
// job reports whether its loss and gradients are finite and its share of the squared gradient
// norm, all ranks exchange the figures in the same step, and each decides alike: skip the step
// everywhere when anything is not finite, otherwise scale the gradients so the whole model's norm
// is at most `clip_norm`. Gradients of rows on parameter servers are checked and scaled too, and
// counted in the norm when each stage's replica 0 reports the squared norm of what the servers
// apply (with one replica, its own rows; with more, the replicas' rows summed by key:
// RemoteRowsRegistry::set_replica_exchange).
// `report` sends this rank's figures without waiting; `verdict` collects everyone's, so a stage
// validating after its update (Zero Bubble's optimizer post-validation) updates while they travel.
// With sharded optimizer state each replica reports the squares of the gradient slices it owns,
// and those are summed over every rank.
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
  // How the figures travel (round = the step): `send` hands `values` to every other rank and returns
  // without waiting for theirs; `collect` waits, up to a deadline, for every rank's figures of the
  // round and returns them indexed by rank (`values`, this rank's, at its own index).
  struct Exchange {
    std::function<void(const std::vector<double>& values, std::int64_t round)> send;
    std::function<std::vector<std::vector<double>>(const std::vector<double>& values, std::int64_t round)> collect;
  };
  // `stages`: ranks 0..stages-1 are replica 0, whose figures make up the model's norm.
  StepGuard(int rank, int stages, double clip_norm, ServerRowsInNorm server_rows, Exchange exchange);

  pipeline::UpdateDecision report(std::int64_t step, const pipeline::GradientShare& counted,
                                  double remote_squares, double loss_sum) override;
  pipeline::UpdateDecision verdict(std::int64_t step) override;
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
  std::vector<double> reported_;   // this rank's figures, sent and not yet collected
  std::int64_t reported_step_ = -1;
  int nonfinite_rank_ = -1;
  bool loss_finite_ = true;
  double norm_ = 0.0;
};

}  // namespace pw::train
