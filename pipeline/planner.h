#pragma once
// Planning shared by `pipewright plan` and `pipewright train`: the partitioner's cost model for a
// schedule, the choice of split, and the simulator's op times from per-stage estimates.
#include <vector>

#include "partition/cost_model.h"
#include "partition/partitioners.h"
#include "partition/profiler.h"
#include "pipeline/simulator.h"

namespace pw::pipeline {

// How many micro-batches a schedule keeps in flight per stage, in the cost model's terms.
partition::InFlight in_flight_of(ScheduleKind kind);
// Whether its stages split each backward into input and weight halves, in the cost model's terms.
partition::BackwardOps backward_ops_of(ScheduleKind kind);

// Explicit split points (non-empty), or else an automatic method.
struct SplitChoice {
  std::vector<int> split_points;
  partition::PartitionMethod method = partition::PartitionMethod::Uniform;
};

// `profiles` is needed for PartitionMethod::Profile only (may be empty otherwise).
partition::Partition choose_partition(const partition::ModelDescription& model, const SplitChoice& choice,
                                      const partition::CostModel& cost,
                                      const std::vector<partition::LayerProfile>& profiles);

// Op times per virtual stage from the estimates. Recomputation is charged to the backward;
// ZB-H1, with no measured split of the backward, gets half for each half.
OpTimes op_times(const ScheduleSpec& spec, const std::vector<partition::StageEstimate>& pieces);

}  // namespace pw::pipeline
