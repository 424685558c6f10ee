#pragma once
// What rank 0 knows after a step, for the monitors that report it while the job runs (TensorBoard,
// the metrics endpoint): the job-wide StepOutcome and rank 0's own view of the step.
#include <cstdint>
#include <optional>
#include <vector>

#include "pipewright/fit.h"
#include "train/straggler_detector.h"

namespace pw::train {

struct StepFigures {
  std::int64_t step = 0;             // 1-based, after the step
  const StepOutcome* outcome = nullptr;
  double step_seconds = 0.0;         // engine.step
  double data_wait_seconds = 0.0;    // waiting for the loader before and during it
  double learning_rate = 0.0;
  double samples_per_second = 0.0;   // over the run so far
  std::int64_t skipped_steps = 0;    // so far
  bool fp16 = false;
  // Straggler windows that ended with this step, and the time stragglers cost so far (replicas > 1).
  std::vector<StragglerWindow> stragglers;
  std::optional<double> straggler_cost_seconds;
};

// A stage's step on rank 0's clock, each share in [0, 1], adding up to 1: computing, communicating
// (sending, copying what arrived, the all-reduce's exposed wait), and waiting for a neighbour.
struct StageShares {
  double busy = 0.0;
  double communication = 0.0;
  double bubble = 0.0;
};
StageShares stage_shares(const StepFigures& f, std::size_t stage);
// The share of the step rank 0 waited for its loader.
double data_wait_share(const StepFigures& f);

}  // namespace pw::train
