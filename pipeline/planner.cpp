#include "pipeline/planner.h"

#include "partition/profile_partitioner.h"

namespace pw::pipeline {

partition::InFlight in_flight_of(ScheduleKind kind) {
  if (kind == ScheduleKind::GPipe) return partition::InFlight::AllMicroBatches;
  if (kind == ScheduleKind::ZeroBubbleH2) return partition::InFlight::TwiceStages;
  return partition::InFlight::StagesAhead;
}

partition::BackwardOps backward_ops_of(ScheduleKind kind) {
  return splits_backward(kind) ? partition::BackwardOps::Split : partition::BackwardOps::Whole;
}

partition::Partition choose_partition(const partition::ModelDescription& model, const SplitChoice& choice,
                                      const partition::CostModel& cost,
                                      const std::vector<partition::LayerProfile>& profiles) {
  const int layers = model.layer_count();
  if (!choice.split_points.empty()) return partition::split_at(layers, choice.split_points, {"split points", model.name});
  partition::check_stage_count(layers, cost.pieces(), model.name);
  switch (choice.method) {
    case partition::PartitionMethod::Uniform: return partition::partition_uniform(layers, cost.pieces());
    case partition::PartitionMethod::Params:
      return partition::partition_by_params(partition::layer_parameter_counts(model), cost.pieces());
    case partition::PartitionMethod::Profile:
      PW_CHECK(static_cast<int>(profiles.size()) == layers, "the profile partitioner needs a profile of every layer");
      return partition::partition_by_profile(profiles, cost, model.name);
  }
  PW_FAIL("unhandled partition method");
}

OpTimes op_times(const ScheduleSpec& spec, const std::vector<partition::StageEstimate>& pieces) {
  const auto n = pieces.size();
  OpTimes t;
  t.forward.resize(n);
  t.backward_input.resize(n);
  t.backward_weight.resize(n);
  t.send_activation.resize(n);
  t.send_gradient.resize(n);
  const bool split_backward = splits_backward(spec.kind);
  for (std::size_t v = 0; v < n; ++v) {
    const auto& e = pieces[v];
    // Re-run forwards belong to the input half: a selective rebuild runs inside it.
    const double recompute = e.recomputes ? e.forward_seconds : e.rebuild_seconds;
    const double backward = e.backward_seconds - recompute;
    t.forward[v] = e.forward_seconds;
    // Split: the profiled halves (together more than the fused backward), or half each where the
    // profile has none.
    const bool halves = e.input_half_seconds > 0.0 && e.weight_half_seconds > 0.0;
    t.backward_input[v] = (split_backward ? (halves ? e.input_half_seconds : backward / 2) : backward) + recompute;
    t.backward_weight[v] = split_backward ? (halves ? e.weight_half_seconds : backward / 2) : 0.0;
    t.send_activation[v] = e.send_seconds;
    t.send_gradient[v] = e.send_gradient_seconds;
  }
  return t;
}

}  // namespace pw::pipeline
