#pragma once
// The training loop, for the CLI and for user programs: one engine per rank reads its part of
// each global batch, steps, and at the end saves, evaluates and summarises. Callbacks see every
// step (progress, logging) and the summary before it is written.
//
//   pw::train::JobConfig job;            // model, data, pipeline shape, replicas, optimizer...
//   pw::train::FitOptions out;           // summary, weights, trace files
//   const auto summary = pw::train::run_job(job, out);
//
// run_job runs the job embedded (every rank a thread of this process) unless a launcher's
// environment says this process is one rank of a multi-process job (pipewright launch,
// torchrun-style variables, srun, mpirun); the same code path serves both.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/engine.h"
#include "train/job_config.h"

namespace pw::train {

struct FitOptions {
  std::string summary_path;   // JSON summary (rank 0)
  std::string save_path;      // trained weights, safetensors (rank 0)
  // Chrome trace of the recorder's spans (run_job turns it on for [trace_first, trace_last));
  // multi-process jobs write FILE.rankN.json.
  std::string trace_path;
  std::int64_t trace_first = 0, trace_last = INT64_MAX;   // traced steps [first, last)
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
};

// One rank's whole job on its engine. Returns the summary on rank 0 (an empty object elsewhere).
nlohmann::json fit(Engine& engine, const FitOptions& options, const FitCallbacks& callbacks = {});

// Builds the world and the engines, and fits. Returns rank 0's summary where this process runs
// rank 0 (an empty object elsewhere).
nlohmann::json run_job(const JobConfig& config, const FitOptions& options, const FitCallbacks& callbacks = {});

// "A:B" -> [A, B); every step when empty. InputError naming --trace-steps otherwise.
std::pair<std::int64_t, std::int64_t> parse_trace_steps(const std::string& text);

}  // namespace pw::train
