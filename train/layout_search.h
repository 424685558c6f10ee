#pragma once
// Which layout of a job fits its devices and runs fastest: enumerates stages x replicas x
// micro-batches x schedule x optimizer-state sharding x offload for a JobConfig (a zoo model
// or a program's own layer list), predicts each one's step time and per-device memory from
// profiled per-layer costs (layout_prediction.h), keeps those whose every stage fits the device
// cap and ranks them by predicted step time. Each layout recomputes only on the stages that need it
// to fit (cheapest first by predicted recompute time), and its split is chosen for that. What `pipewright plan --search` prints; a program
// calls it for its own model the same way.
#include <cstdint>
#include <functional>
#include <vector>

#include "partition/profiler.h"
#include "pipewright/enums.h"
#include "train/job_config.h"
#include "train/job_plan.h"
#include "train/layout_prediction.h"

namespace pw::train {

enum class RecomputeSearch { PerStage, Fixed };

struct SearchSpace {
  int devices = 1;                   // at most this many ranks (stages x replicas)
  int nodes = 1;                     // the devices split evenly over this many nodes
  std::int64_t device_memory = 0;    // cap of every device; 0: none
  std::vector<pipeline::ScheduleKind> schedules{pipeline::ScheduleKind::GPipe, pipeline::ScheduleKind::OneFOneB,
                                                pipeline::ScheduleKind::Interleaved,
                                                pipeline::ScheduleKind::ZeroBubbleH1,
                                                pipeline::ScheduleKind::ZeroBubbleH2};
  // PerStage: each layout recomputes only the stages that would not fit without it, cheapest
  // first (AdaPipe's choice per stage); Fixed: each mode in `recompute` is a layout of its own.
  RecomputeSearch recompute_search = RecomputeSearch::PerStage;
  std::vector<partition::Recompute> recompute{partition::Recompute::None, partition::Recompute::All};   // Fixed
  // Optimizer state on the device, and in host memory (--offload-optimizer).
  std::vector<models::OptimizerOffload> offload{models::OptimizerOffload::None, models::OptimizerOffload::Host};
  // Micro-batches per replica: P, 2P, ... up to this many times P (those that divide its batch).
  int max_micro_batches_per_stage = 4;
};

struct RankedLayout {
  JobConfig config;              // the base config with this layout's fields, its split explicit
  LayoutPrediction prediction;
};

struct SearchResult {
  std::vector<RankedLayout> fitting;    // fastest first
  int considered = 0;                   // layouts predicted
  std::int64_t smallest_peak = 0;       // the least peak per device among every layout considered
};

// The links a search of `space` predicts with: `links`, with the devices spread over its nodes
// (no host's cores shared when there are several).
LinkSpeeds links_of_space(const LinkSpeeds& links, const SearchSpace& space);

// Profiles of every layer of `plan`'s model at `micro_batch_size` (the search asks once per size).
using LayerProfiler = std::function<std::vector<partition::LayerProfile>(const JobPlan& plan, std::int64_t micro_batch_size)>;
// Measures on `device` with `repeats` timed runs per layer (and the plan's optimizer step),
// remembering each micro-batch size and optimizer; on CPU devices with `links.host_cores` given,
// also beside the job's other ranks (prediction_profile_options).
LayerProfiler profile_on(kernels::Device device, int repeats, std::uint64_t seed, const LinkSpeeds& links);

// ConfigError naming the field when the base config cannot be planned at all; InputError for a
// search space that cannot hold a layout (no devices).
SearchResult search_layouts(const JobConfig& base, const SearchSpace& space, const LinkSpeeds& links,
                            const LayerProfiler& profiler);

// "2 stages x 2 replicas, 1f1b, 4 micro-batches, recompute none,all, sharded state" for a layout.
std::string describe_layout(const JobConfig& config);

}  // namespace pw::train
