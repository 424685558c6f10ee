#pragma once
// `pipewright prof`'s split suggestion from the planner: the traced job re-planned from the config
// its trace records, each piece's traced forward and backward time spread over the piece's layers
// in the proportions the planner's own per-layer profile gives them, and the profile partitioner's
// split (the one the layout search would pick) predicted against the traced split.
#include <functional>
#include <optional>
#include <set>
#include <vector>

#include "partition/profiler.h"
#include "train/trace_file.h"

namespace pw::tools {

enum class CapFit { Fits, Over };

// Re-planned under the traced job's device cap (a split predicted over it is never suggested) and
// with its stage links' bandwidth as the trace measured it.
struct SplitReplan {
  std::vector<int> split;         // the suggested split points; empty: none is faster
  double traced_step = 0.0;       // seconds: the prediction of the traced split
  double suggested_step = 0.0;    // seconds: the prediction of the suggested split
  CapFit traced_fit = CapFit::Fits;   // the traced split's predicted peak against the cap
  double stage_link_bytes_per_s = 0.0;   // what the prediction used: measured, or the device's default
};

// The per-layer costs whose proportions spread each piece's traced time over its layers, for
// `model` at `micro_batch` samples: by default its layers profiled on cpu:0.
using LayerCosts = std::function<std::vector<partition::LayerProfile>(const partition::ModelDescription& model,
                                                                      std::int64_t micro_batch)>;
std::vector<partition::LayerProfile> profile_on_cpu(const partition::ModelDescription& model, std::int64_t micro_batch);

// nullopt when the job cannot be re-planned here (a trace without its config, a program's own
// model, a data set that is not on this machine, a one-stage job); else the fastest split the
// prediction ranks that fits the cap, or an empty `split` when none is at least 1% faster than the
// traced one (when the traced split is predicted over the cap: when none fits).
// `steps`: the traced steps whose spans count.
std::optional<SplitReplan> replan_split(const train::TraceData& data, const std::set<std::int64_t>& steps,
                                        const LayerCosts& costs = profile_on_cpu);

}  // namespace pw::tools
