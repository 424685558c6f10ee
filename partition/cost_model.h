#pragma once
// Per-stage time and memory estimates from layer profiles: what the profile partitioner minimises
// and what `pipewright plan` prints, for any partition.
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "pipewright/enums.h"
#include "models/optimizer.h"
#include "partition/model_description.h"
#include "partition/piece_placement.h"
#include "partition/profiler.h"

namespace pw::partition {

struct LinkModel {
  double bandwidth_bytes_per_s = 10e9;   // CPU devices in one process: about memory bandwidth
  double latency_s = 0.0;
  double transfer_seconds(std::int64_t bytes) const;
};

// How many micro-batches' activations a stage holds at once. The pipeline library maps its
// schedule kinds here (partition sits below pipeline and cannot name them).
enum class InFlight {
  AllMicroBatches,   // GPipe: every forward runs before the first backward
  StagesAhead,       // 1F1B, ZB-H1 (and interleaved, approximately): stage s holds min(P - s, M)
  TwiceStages,       // ZB-H2: every stage holds min(2P - 1, M) until their weight gradients
};

// Whether a stage runs each backward as one op or as its input half (Bi) and, later, its weight
// half (W), as the zero-bubble kinds do: from Bi until W a micro-batch holds what W needs
// (LayerProfile::weight_half_bytes) instead of its stash.
enum class BackwardOps { Whole, Split };

// Recompute and its names: pipewright/enums.h.

// "none", "all", "except-last"; anything else is an InputError listing them.
Recompute parse_recompute(const std::string& name);
std::string recompute_name(Recompute recompute);

// Recomputation chosen stage by stage (AdaPipe): one entry per pipeline stage, each None or All.
// Empty: the job-wide Recompute mode decides for every stage.
using RecomputeStages = std::vector<Recompute>;

// "none,all,all,none": one entry per stage, each none or all; anything else is an InputError
// saying what is accepted.
RecomputeStages parse_recompute_stages(const std::string& text);
// The same text back; the mode's name when `per_stage` is empty.
std::string recompute_text(Recompute mode, const RecomputeStages& per_stage);

// Whether pipeline stage `stage` of `stages` recomputes: its own entry when `per_stage` is given,
// else `mode` (ExceptLast: every stage but the last).
bool stage_recomputes(Recompute mode, const RecomputeStages& per_stage, int stage, int stages);

// Tensors of optimizer state per parameter tensor: SGD 1 (momentum), Adam 2, Adagrad 1.
int optimizer_state_tensors(models::OptimizerKind kind);

struct CostModel {
  int stages = 1;                  // P devices
  int chunks = 1;                  // V model chunks per device (interleaved or V placement); P * V pieces
  ChunkPlacement placement = ChunkPlacement::Interleaved;
  int micro_batches = 1;           // M
  InFlight in_flight = InFlight::StagesAhead;
  BackwardOps backward = BackwardOps::Whole;
  Recompute recompute = Recompute::None;
  RecomputeStages recompute_stages;   // one per stage when chosen per stage; overrides `recompute`
  std::set<std::string> recompute_layers;   // selective: these layers recompute where their stage does not
  int optimizer_state = 2;         // tensors per parameter, see optimizer_state_tensors
  // Replicas each holding 1/optimizer_shards of every stage's optimizer state (--shard-optimizer).
  int optimizer_shards = 1;
  LinkModel link;
  std::vector<std::int64_t> device_memory;   // cap per device; one entry applies to all; empty or 0: none

  int pieces() const { return stages * chunks; }
  std::int64_t memory_cap(int device) const;   // 0: no cap
};

// Estimates for one piece of the model (a stage, or a chunk of a stage when V > 1).
struct StageEstimate {
  int piece = 0;                    // virtual stage index, 0..P*V-1
  int device = 0;                   // the stage holding the piece (locate_piece)
  int chunk = 0;                    // its chunk there
  StageRange range;
  std::vector<std::string> layer_names;
  std::int64_t parameters = 0;
  double forward_seconds = 0.0;     // per micro-batch
  double backward_seconds = 0.0;    // per micro-batch, recomputation included
  // The backward's two halves as profiled (LayerProfile), recomputation not included; 0 where
  // the profile has none.
  double input_half_seconds = 0.0;
  double weight_half_seconds = 0.0;
  bool recomputes = false;          // the whole piece: keeps its input, re-runs every forward
  double rebuild_seconds = 0.0;     // selective: its recomputed layers' forwards, re-run inside the backward
  std::int64_t rebuild_bytes = 0;   // selective: one run's contexts, rebuilt during one backward
  double send_seconds = 0.0;        // per micro-batch: its output activation over the link (0 for the last)
  double send_gradient_seconds = 0.0;      // per micro-batch: its input gradient back (0 for the first)
  std::int64_t output_bytes = 0;
  std::int64_t input_bytes = 0;
  double step_seconds = 0.0;        // M * (F + B + send): what the partitioner balances
  std::int64_t weight_bytes = 0;    // parameters, gradients, optimizer state, buffers
  std::int64_t activation_bytes = 0;   // stashed micro-batches plus one layer's working set
  std::int64_t stash_bytes = 0;     // what its layers keep for backward per micro-batch (selective recompute included)
  // What its layers keep per micro-batch from the input half of a split backward (Bi) until the
  // weight half (W): output gradients and the inputs the weight gradients need.
  std::int64_t weight_half_bytes = 0;
  // The most a micro-batch holds while its input half runs, layer by layer from the last: the
  // stashes of the layers not yet done, the weight halves of those done, and the working set of
  // the running one (its incoming and outgoing gradients included).
  std::int64_t input_half_peak_bytes = 0;
  // The input a piece holds per micro-batch: what it receives from the piece before it (memory the
  // allocator counts as communication), 0 for the first piece, whose input is a view of the data
  // loader's batch (counted with the loader). The first piece's stash and weight half leave it out.
  std::int64_t received_bytes = 0;
  // The parts of stash_bytes and weight_half_bytes that are that received input (its first layer
  // keeps it).
  std::int64_t stash_received_bytes = 0;
  std::int64_t weight_half_received_bytes = 0;
  std::int64_t workspace_bytes = 0; // the largest working set of one of its layers
  std::int64_t memory_bytes = 0;    // weight_bytes + activation_bytes
  std::int64_t memory_cap = 0;      // this piece's share of its device cap; 0: none
  bool fits() const { return memory_cap == 0 || memory_bytes <= memory_cap; }
};

StageEstimate estimate_piece(const std::vector<LayerProfile>& layers, const CostModel& cost, int piece, StageRange range);
std::vector<StageEstimate> estimate_stages(const std::vector<LayerProfile>& layers, const CostModel& cost,
                                           const Partition& partition);

// Per device (summing its chunks when V > 1): memory and step time.
struct DeviceEstimate {
  int device = 0;
  double step_seconds = 0.0;
  std::int64_t memory_bytes = 0;
  std::int64_t memory_cap = 0;
  bool fits() const { return memory_cap == 0 || memory_bytes <= memory_cap; }
};
std::vector<DeviceEstimate> per_device(const std::vector<StageEstimate>& pieces, const CostModel& cost);

// By device (0..devices-1): how much longer its layers' forward and backward took in the profile
// with co-runners beside them than alone (LayerProfile::co_run_*), summed over its pieces' layers:
// 0.2 for 20%; 0 where not measured, and never below 0 (a faster run beside others is noise).
std::vector<double> co_run_slowdowns(const std::vector<LayerProfile>& layers, const std::vector<StageEstimate>& pieces,
                                     int devices);

}  // namespace pw::partition
