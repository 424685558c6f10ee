#pragma once
// What rank 0 reports while a run trains, in one place: TensorBoard (--tensorboard), the metrics
// endpoint (--metrics-port) and straggler detection (with replicas). fit makes one per run and
// hands it each step's figures; the other ranks make none.
#include <cstdint>
#include <optional>

#include <nlohmann/json.hpp>

#include "train/job_metrics.h"
#include "train/step_figures.h"
#include "train/straggler_detector.h"
#include "train/tensorboard_log.h"

namespace pw::train {

class Engine;

class RunMonitors {
 public:
  // InputError for a bad straggler setting, a TensorBoard folder or metrics port that cannot be
  // used. `first_step`: where the run starts (a resumed job's checkpoint).
  RunMonitors(const Engine& engine, const FitOptions& options, std::int64_t first_step, std::int64_t total_steps);

  // `f` without its straggler fields: they are filled here. `step_wall_seconds`: the step's
  // whole time on rank 0, what a straggler costs a share of.
  void step(StepFigures f, double step_wall_seconds);
  void evaluation(std::int64_t step, double accuracy, double loss);
  nlohmann::json stragglers() const;   // the summary's `stragglers`

 private:
  std::optional<TensorBoardLog> tensorboard_;
  std::optional<JobMetrics> metrics_;
  std::optional<StragglerDetector> stragglers_;
};

}  // namespace pw::train
