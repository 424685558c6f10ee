#include "train/step_guard.h"

#include <cmath>
#include <limits>

#include "kernels/ops/elementwise.h"
#include "train/fault_injection.h"

namespace pw::train {

StepGuard::StepGuard(int rank, int stages, double clip_norm, ServerRowsInNorm server_rows, Exchange exchange)
    : rank_(rank), stages_(stages), clip_norm_(clip_norm), server_rows_(server_rows), exchange_(std::move(exchange)) {}

pipeline::UpdateDecision StepGuard::report(std::int64_t step, const pipeline::GradientShare& counted,
                                           double remote_squares, double loss_sum) {
  bool finite = std::isfinite(loss_sum);
  const auto owned_gradient = [](const models::ParameterSlice& s) {
    return s.parameter->grad.view(s.offset, {s.length});
  };
  if (injected_fault(FaultKind::NonfiniteGradient, step + 1, rank_)) {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    if (!counted.whole.empty()) kernels::scale_inplace(counted.whole.front()->grad, nan);
    else if (!counted.owned.empty()) {
      auto g = owned_gradient(counted.owned.front());
      kernels::scale_inplace(g, nan);
    } else {
      finite = false;
    }
  }
  // One batched reduction (one wait on a GPU), summed in the parameters' order as before.
  std::vector<kernels::Tensor> whole, owned;
  for (auto* p : counted.whole) whole.push_back(p->grad);
  for (const auto& s : counted.owned) owned.push_back(owned_gradient(s));
  double squares = 0.0, owned_squares = 0.0;
  for (double v : kernels::sums_of_squares(whole)) squares += v;
  for (double v : kernels::sums_of_squares(owned)) owned_squares += v;
  finite = finite && std::isfinite(squares) && std::isfinite(owned_squares) && std::isfinite(remote_squares);
  const bool loss_finite = std::isfinite(loss_sum);
  reported_ = {finite ? 1.0 : 0.0, finite ? squares : 0.0, finite ? remote_squares : 0.0, loss_finite ? 1.0 : 0.0,
               finite ? owned_squares : 0.0};
  reported_step_ = step;
  exchange_.send(reported_, step);
  pipeline::UpdateDecision provisional;
  if (!finite) provisional.action = pipeline::UpdateAction::Skip;
  provisional.gradient_scale /= loss_scale_;
  return provisional;
}

pipeline::UpdateDecision StepGuard::verdict(std::int64_t step) {
  PW_CHECK(reported_step_ == step, "step " << step << ": verdict asked for before this rank reported its figures");
  reported_step_ = -1;
  const auto all = exchange_.collect(reported_, step);
  nonfinite_rank_ = -1;
  loss_finite_ = true;
  double total = 0.0;
  const bool rows_counted = server_rows_ == ServerRowsInNorm::Counted;
  for (std::size_t r = 0; r < all.size(); ++r) {
    if (all[r][0] == 0.0 && nonfinite_rank_ < 0) nonfinite_rank_ = static_cast<int>(r);
    if (all[r].size() > 3 && all[r][3] == 0.0) loss_finite_ = false;
    if (static_cast<int>(r) < stages_) {
      // Replica 0: the dense gradients every replica holds after the all-reduce, and (when they
      // count) the rows as the servers apply them, summed over the replicas.
      total += all[r][1];
      if (rows_counted) total += all[r][2];
    }
    // Sharded gradients: every rank holds its own slices' sums.
    if (all[r].size() > 4) total += all[r][4];
  }
  pipeline::UpdateDecision d;
  if (nonfinite_rank_ >= 0) {
    norm_ = std::numeric_limits<double>::quiet_NaN();
    d.action = pipeline::UpdateAction::Skip;
    return d;
  }
  norm_ = std::sqrt(total) / loss_scale_;
  // torch.nn.utils.clip_grad_norm_: scale by max_norm / (norm + 1e-6) when that is below 1.
  if (clip_norm_ > 0.0) {
    const double coefficient = clip_norm_ / (norm_ + 1e-6);
    if (coefficient < 1.0) d.gradient_scale = coefficient;
  }
  d.gradient_scale /= loss_scale_;
  return d;
}

}  // namespace pw::train
