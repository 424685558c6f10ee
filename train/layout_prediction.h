#pragma once
// Step time and memory of one job layout (a JobPlan and its split), predicted from profiled
// per-layer costs: the schedule simulated with per-stage op times, the replicas' gradient
// collectives and the optimizer step added, and each stage's device memory by the allocator's
// kinds. What `pipewright plan` prints and the layout search (layout_search.h) ranks.
#include <cstdint>
#include <vector>

#include "kernels/allocator.h"
#include "partition/cost_model.h"
#include "partition/profiler.h"
#include "pipeline/planner.h"
#include "pipeline/shared_cores.h"
#include "pipeline/simulator.h"
#include "train/job_plan.h"
#include "train/memory_prediction.h"

namespace pw::train {

// Bandwidths the prediction assumes (bytes per second). The defaults are stated, not measured:
// in-process copies between CPU devices run at about memory bandwidth (10 GB/s); GPUs of one node
// talk over PCIe 4.0 x16 (25 GB/s); nodes over a 100 Gb/s network (12.5 GB/s). The optimizer step
// streams its weights, gradients and state through memory at `memory_bytes_per_s`.
struct LinkSpeeds {
  double stage_bytes_per_s = 10e9;        // between the stages of one node
  double replica_bytes_per_s = 10e9;      // the replicas' gradient collectives within one node
  double inter_node_bytes_per_s = 12.5e9; // any link between two nodes
  // Per message between stages, from its send until the receiver has it (plan measures it for
  // CPU jobs: measure_stage_handoff on idle cores).
  double latency_s = 0.0;
  // Per step of the replicas' ring collectives within one node (a bucket's all-reduce among R
  // takes 2 (R - 1) of them). plan measures it with the bandwidth for CPU jobs (link_calibration.h).
  double replica_latency_s = 0.0;
  // Per call of the replicas' collectives beyond its steps: waking the ranks' collective threads
  // after the backward or the update (a bucket's all-reduce is one call; sharded state makes it two,
  // a reduce-scatter and an all-gather). plan measures it too.
  double replica_call_s = 0.0;
  double memory_bytes_per_s = 10e9;       // the optimizer step's reads and writes
  // --offload-optimizer: the update runs in host memory, and on a GPU the gradients come down and
  // the weights go back up over the host link (0: the device is the host, nothing is copied).
  double host_memory_bytes_per_s = 10e9;
  double host_link_bytes_per_s = 0.0;
  int devices_per_node = 0;               // ranks per node, replica-major as the engine numbers them; 0: one node
  // CPU devices: the cores of the one host all ranks run on, which they share (each rank running
  // /resources/threads threads; pipeline/shared_cores.h). 0: every rank has cores of its own.
  int host_cores = 0;
  // CPU devices: what a message between stages waits beyond `latency_s` when the ranks' threads
  // outnumber host_cores (its receiver waits for a core). plan measures it (measure_stage_handoff
  // with the cores busy, less latency_s).
  double busy_handoff_s = 0.0;
};
// The defaults above for a job whose devices are CPUs or CUDA GPUs.
LinkSpeeds default_link_speeds(const kernels::Device& device);

struct StagePrediction {
  int stage = 0;
  std::int64_t parameters = 0;
  double pipeline_seconds = 0.0;        // M x (F + B + send) over its chunks
  double gradient_sync_seconds = 0.0;   // all-reduce (or reduce-scatter + all-gather) over the replicas, and the running statistics' broadcast
  double optimizer_seconds = 0.0;
  // How much longer its ops take when all the job's ranks that can compute at once on the shared
  // host do (partition::co_run_slowdowns; 0.2: 20%); 0 when not measured or not shared.
  double co_run_slowdown = 0.0;
  kernels::BytesByKind memory{};        // at the stage's predicted peak (replica 0's rank)
  std::int64_t peak_bytes = 0;
  // The stage's ranks on the other replicas: on CPU devices (ranks as threads) the first stage's
  // rank of replica 0 holds every replica's loader batches, the others none; otherwise peak_bytes.
  std::int64_t other_replicas_peak_bytes = 0;
  std::int64_t memory_cap = 0;          // 0: none
  bool fits() const { return memory_cap == 0 || peak_bytes <= memory_cap; }
};

struct LayoutPrediction {
  partition::CostModel cost;
  partition::Partition partition;
  std::vector<partition::StageEstimate> pieces;
  std::vector<StagePrediction> stages;
  pipeline::SimulationResult simulation;
  // The simulated pipeline, then the slowest stage's gradient collectives and optimizer step
  // (counted after the last backward: no overlap is assumed). On CPU ranks that share the host's
  // cores (LinkSpeeds::host_cores), ops that run at once are slowed down by the sharing, the
  // collectives and steps of every rank too.
  double step_seconds = 0.0;
  bool fits() const;
  std::int64_t peak_bytes() const;   // the largest stage's
};

// The memory settings the job's config implies.
MemorySettings memory_settings_of(const JobPlan& plan);

// Predicts `plan` with `split` (one range per piece) from `profiles` of every layer, measured with
// the plan's micro-batch size.
LayoutPrediction predict_layout(const JobPlan& plan, const std::vector<partition::LayerProfile>& profiles,
                                const partition::Partition& split, const LinkSpeeds& links);

// The split the job would use (its split points, the model's own, or its partition method, which
// for `profile` balances `profiles` under the device cap), then the prediction of it.
LayoutPrediction predict_job(const JobPlan& plan, const std::vector<partition::LayerProfile>& profiles,
                             const LinkSpeeds& links);

// The profile partitioner's split of `plan`'s model for `profiles`, whatever split the job names:
// the fastest that fits the device cap, else the fastest with no cap; then the prediction of it.
// What the layout search ranks each layout by, and what `pipewright prof` re-plans a trace with.
LayoutPrediction predict_balanced_split(const JobPlan& plan, const std::vector<partition::LayerProfile>& profiles,
                                        const LinkSpeeds& links);

// The micro-batch size each stage runs: the global batch over replicas and micro-batches.
std::int64_t micro_batch_size_of(const JobPlan& plan);

// How long a prediction's profile times each chain of layers, at the least (a job's steps run for
// about as long in `bench/planner_accuracy.sh`).
inline constexpr double kPredictionChainSeconds = 0.5;

// How a prediction of `plan` profiles its layers at `micro_batch_size`: with the job's
// micro-batches in flight (partition::micro_batches_in_flight_of), each chain timed for
// kPredictionChainSeconds at the least, its optimizer's step timed, and
// on CPU devices sharing a host (`links.host_cores`) with as many co-runners as the job has other
// ranks computing at once (co_runners_of).
// (A job that profiles for its own split, choose_split, times one micro-batch in flight instead.)
partition::ProfileOptions prediction_profile_options(const JobPlan& plan, std::int64_t micro_batch_size, int repeats,
                                                     std::uint64_t seed, const LinkSpeeds& links);

// The other ranks that can compute at once beside one on the shared host: co_run_threads over
// each rank's threads, less its own. 0 when the ranks do not share one host's cores.
int co_runners_of(const pipeline::CoreSharing& sharing);

// How `plan`'s ranks share the host's cores: none unless its devices are CPUs and
// `links.host_cores` is given; each rank runs /resources/threads threads (0: its share of the
// cores, which cannot oversubscribe them). The slowdowns beside other ranks come from the
// profiles, by stage (predict_layout sets them).
pipeline::CoreSharing core_sharing_of(const JobPlan& plan, const LinkSpeeds& links);

}  // namespace pw::train
