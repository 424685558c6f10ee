#pragma once
// The training loop a program calls: it builds the job's ranks (threads of this process, or this
// process as one rank of a job a launcher started), trains, and returns the summary.
//
//   pw::train::JobConfig job;            // model, data, pipeline shape, replicas, optimizer...
//   pw::train::FitOptions out;           // summary, weights, trace files
//   const auto summary = pw::train::run_job(job, out);
//
// run_job runs the job embedded (every rank a thread of this process) unless a launcher's
// environment says this process is one rank of a multi-process job (pipewright launch,
// torchrun-style variables, srun, mpirun); the same code path serves both. Callbacks see every
// step (progress, logging) and the summary before it is written.
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipewright/job_config.h"

namespace pw::train {

class Engine;   // one rank's part of the job (internal)

// One rank's device memory at its peak so far (since the job started), and what it held then, as
// its allocator counted the bytes (rounded block sizes of live tensors).
struct RankMemory {
  int rank = 0;
  std::int64_t peak_bytes = 0;
  std::int64_t parameters = 0;        // weights the layers compute with (16-bit copies under bf16/fp16), buffers
  std::int64_t gradients = 0;
  std::int64_t master_weights = 0;    // fp32 weights under bf16/fp16 (on the host when offloaded)
  std::int64_t optimizer_state = 0;   // momentum, Adam's moments
  std::int64_t activations = 0;       // forward contexts and outputs, and the gradients flowing back
  std::int64_t communication = 0;     // received copies, all-reduce buckets
  std::int64_t workspace = 0;         // everything else
  // Host memory held for the rank outside its device's cap at the end of the step: the
  // offloaded optimizer state and fp32 masters (--offload-optimizer) and, on a GPU, the buffers
  // the update is staged in.
  std::int64_t host_bytes = 0;
};

// A step as the whole job saw it: the same figures on every rank.
struct StepOutcome {
  double loss = 0.0;   // mean over the global batch
  std::int64_t correct = 0;
  std::int64_t samples = 0;
  std::vector<double> stage_busy_seconds;        // per stage, the mean over its replicas
  // Per stage, the mean over its replicas: sends, the all-reduce's exposed wait, copies of what
  // arrived (not the waits for a neighbour, which are the bubble).
  std::vector<double> stage_communication_seconds;
  std::vector<std::int64_t> stage_peak_memory;   // per stage, the largest over its replicas
  std::vector<RankMemory> rank_memory;            // per job rank
  // Per job rank (rank = replica * stages + stage): its compute plus its time between steps
  // (loading, host work), leaving out waits for other ranks; what straggler detection compares.
  std::vector<double> rank_own_seconds;
  std::vector<std::int64_t> gradient_buckets;    // per stage (replica 0); empty with one replica
  double allreduce_exposed_seconds = 0.0;        // the largest over ranks
  // Non-finite loss or gradients somewhere: no rank updated (nonfinite_rank: the lowest that saw it).
  bool skipped = false;
  int nonfinite_rank = -1;
  // Of the whole model, before clipping (NaN when skipped). Rows on parameter servers count as the
  // servers apply them; with replicas > 1 only when clipping (/recovery/clip_grad_norm), since their
  // sum over the replicas costs an exchange of the rows.
  double gradient_norm = 0.0;
  // fp16: the step was skipped because its scaled gradients overflowed, and the loss scaler
  // halved its scale (not a bad step: the recovery rules do not count it).
  bool overflow = false;
  double loss_scale = 1.0;            // the scale this step's loss gradient was multiplied by
  std::int64_t boundary_bytes = 0;    // activations and gradients sent between stages, all ranks
  double primary_flags = 0.0;   // what rank 0 passed to step()
};

struct FitOptions {
  std::string summary_path;   // JSON summary (rank 0)
  std::string save_path;      // trained weights, safetensors (rank 0)
  // Chrome trace of the recorder's spans (run_job turns it on for [trace_first, trace_last));
  // multi-process jobs write FILE.rankN.json.
  std::string trace_path;
  std::int64_t trace_first = 0, trace_last = INT64_MAX;   // traced steps [first, last)
  // TensorBoard event files (rank 0): the job's scalars after every step and the evaluation.
  std::string tensorboard_dir;
  // With replicas: a rank whose own time per step (compute and host work, not waits) is more than
  // this much above its stage's other replicas over a window of steps is reported as a straggler
  // (a log line, TensorBoard scalars, the summary's `stragglers`).
  double straggler_threshold = 0.2;
  // Rank 0 serves the job's live figures in Prometheus' text format at http://HOST:PORT/metrics,
  // HOST the job's bind address (loopback in one process); 0: any free port (logged); -1: off.
  int metrics_port = -1;
  // Flight records (the last instructions of every rank, pipeline/flight_recorder.h) are written
  // here when the job fails on a timeout or an abort, for `pipewright prof --hang DIR`; while the
  // job runs, each rank also keeps its record in flight-rank<R>.live here (removed when its engine
  // goes; left by a rank killed or crashed; a folder that cannot be written is an error at the
  // start of fit). Empty: none.
  std::string debug_dir;
  std::int64_t straggler_window = 20;   // steps
  std::int64_t log_every = 50;       // progress line every N steps when stderr is not a terminal
  std::int64_t warmup_steps = 5;     // left out of the steady-state throughput
  bool progress = true;              // rank 0 prints a progress line and the results
};

struct StepEvent {
  std::int64_t step = 0;   // 1-based, after the step
  std::int64_t total_steps = 0;
  double seconds = 0.0;    // of this step
  const StepOutcome* outcome = nullptr;
};

struct FitCallbacks {
  // Before the first step, once per process (its first local rank).
  std::function<void(const Engine&, std::int64_t total_steps)> on_start;
  std::function<void(const StepEvent&)> on_step;                           // rank 0, after every step
  std::function<void(nlohmann::json& summary)> on_summary;                 // rank 0, before it is written
  // Rank 0's log lines and failure causes that name config fields by their paths ("/optimizer/lr")
  // pass through this when set (the pipewright command names its flags instead: "--lr").
  std::function<std::string(const std::string& text)> name_fields;
};

// Builds the world and the engines, and fits. Returns rank 0's summary where this process runs
// rank 0 (an empty object elsewhere). A job that ran but did not train (non-finite weights or test
// loss, no rollback left, every step skipped) throws TrainingFailed naming the cause, after
// writing the summary (its `status` is then "did-not-train" and `failure` the cause; "trained"
// otherwise).
nlohmann::json run_job(const JobConfig& config, const FitOptions& options, const FitCallbacks& callbacks = {});

// "A:B" -> [A, B); every step when empty. InputError saying what is accepted otherwise.
std::pair<std::int64_t, std::int64_t> parse_trace_steps(const std::string& text);

}  // namespace pw::train
