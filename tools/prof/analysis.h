#pragma once
// What `pipewright prof` reports from a trace: per rank (stage and replica), the shares of the
// traced steps spent computing, communicating, waiting for neighbours and idle, beside the
// schedule's analytic bubble; the slowest stage and a faster split: the planner's, when the job can
// be re-planned from its trace and the prediction says it is faster, else, when stages are
// imbalanced, which layer to move where; the step the schedule would take with the traced op times.
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/prof/split_replan.h"
#include "train/trace_file.h"

namespace pw::tools {

// The trace files are the engine's (train/trace_file.h); the profiler reads them.
using train::rank_of;
using train::rank_trace_path;
using train::read_traces;
using train::TraceData;
using train::TraceMeta;
using train::write_chrome_trace;


struct RankUsage {
  int rank = 0, stage = 0, replica = 0;
  double compute = 0.0;         // seconds over the traced steps (forward, backward, recompute, optimizer)
  double recompute = 0.0;       // part of compute
  double communication = 0.0;   // send, copy, waiting for the gradient all-reduce
  double waiting = 0.0;         // for a neighbour's activation or gradient
  double background_allreduce = 0.0;   // the reducer's thread (overlaps the above)
  // compute by span kind: forward, backward, backward-input (B), backward-weight (W), recompute, optimizer
  std::map<trace::SpanKind, double> compute_by_kind;
  double busy() const;          // compute share of the window
};

struct ProfReport {
  TraceMeta meta;
  int steps = 0;
  std::int64_t first_step = 0, last_step = 0;
  double window = 0.0;          // seconds: the traced steps, first to last span of each
  std::vector<RankUsage> ranks;
  double measured_bubble = 0.0; // 1 - mean busy share
  double analytic_bubble = 0.0; // the schedule with equal op times
  // The schedule simulated with the op times this trace measured (per piece and micro-batch, the
  // mean over traced steps and replicas; transfers and waits free): the step the schedule would
  // take if only its compute mattered. measured step / simulated step is the executor's overhead
  // plus the transfers (pipeline_bench's ratio, from a trace; on a GPU the spans are CUDA events).
  double simulated_step = 0.0;  // seconds
  int slowest_stage = 0;
  double imbalance = 0.0;       // slowest stage's compute over the mean, minus one
  std::string suggestion;       // empty when balanced
  // When the trace's job could be re-planned and the planner predicts a faster split
  // (split_replan.h): that split and the predicted steps of the traced split and of it.
  std::vector<int> suggested_split;
  double predicted_traced_step = 0.0, predicted_suggested_step = 0.0;   // seconds
};

// InputError when the trace holds no complete step.
// `costs`: the per-layer costs the split suggestion spreads traced time by (tools/prof/split_replan.h).
ProfReport analyze(const TraceData& data, const LayerCosts& costs = profile_on_cpu);
std::string format_report(const ProfReport& report);
nlohmann::json report_json(const ProfReport& report);

}  // namespace pw::tools
