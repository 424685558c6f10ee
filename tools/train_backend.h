#pragma once
// What `pipewright train` drives: one device (a Trainer) or a pipeline of stages. The training
// loop, progress line and summary are shared; a backend does the steps and reports its extras.
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/data/data_loader.h"
#include "models/trainer.h"
#include "models/zoo/model_spec.h"
#include "rpc/launch_env.h"
#include "tools/prof/trace_file.h"
#include "tools/train_command.h"

namespace pw::tools {

struct StepOutcome {
  double loss = 0.0;
  std::int64_t correct = 0;
  std::int64_t samples = 0;
  std::vector<double> stage_busy_seconds;   // one per stage (one entry on a single device)
};

class TrainBackend {
 public:
  virtual ~TrainBackend() = default;
  virtual std::string describe() const = 0;   // "cpu:0" or "4 stages (1f1b, 8 micro-batches) on cpu:0,..."
  virtual int micro_batches() const { return 1; }   // evaluation runs batches of this fraction
  virtual StepOutcome step(const models::data::Batch& batch) = 0;
  virtual models::EvalResult evaluate(models::data::DataLoader& loader, std::int64_t max_batches) = 0;
  virtual void save(const std::string& path, const std::string& model_name) = 0;
  virtual void reset_peak_memory() = 0;
  virtual void synchronize() = 0;
  // In a multi-process job only rank 0 prints progress and writes the summary and the weights.
  virtual bool is_primary() const { return true; }
  // Whether this process takes part in saving: --save was given (to rank 0, in a multi-process job).
  virtual bool saves(const std::string& path) const { return !path.empty(); }
  virtual void finish() {}   // after the last step, evaluation and save: leave the job cleanly
  // The run stops with `reason` outside a step (multi-process jobs tell the other ranks).
  virtual void abandon(const std::string& reason) noexcept { (void)reason; }
  // What a trace file says about the run (shape, split, layer names, this process's clock offset).
  virtual TraceMeta trace_meta() const = 0;
  // Where this process writes `--trace path` (multi-process jobs: one file per rank).
  virtual std::string trace_path(const std::string& path) const { return path; }
  // Backend-specific summary fields (device, peak memory, stage figures...).
  virtual void add_summary(nlohmann::json& summary, const std::vector<double>& stage_busy_seconds,
                           double train_seconds) = 0;
};

std::unique_ptr<TrainBackend> make_single_device_backend(const TrainOptions& o, const models::ModelSpec& spec,
                                                         const models::OptimizerConfig& optimizer);
std::unique_ptr<TrainBackend> make_pipeline_backend(const TrainOptions& o, const models::ModelSpec& spec,
                                                    const models::OptimizerConfig& optimizer);
// A rank of a multi-process job: one pipeline stage per process.
std::unique_ptr<TrainBackend> make_process_backend(const TrainOptions& o, const models::ModelSpec& spec,
                                                   const models::OptimizerConfig& optimizer, const rpc::LaunchEnv& env);
bool wants_pipeline(const TrainOptions& o);

}  // namespace pw::tools
