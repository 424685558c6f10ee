#pragma once
// Trains a model as a pipeline inside one process: each stage is a persistent thread that owns
// its device (cpu:N with its own cap and threads, or cuda:N) and runs its StageExecutor; stages
// talk through the in-process transport.
#include <chrono>
#include <memory>
#include <vector>

#include "models/data/data_loader.h"
#include "models/trainer.h"
#include "partition/model_description.h"
#include "pipeline/stage_executor.h"
#include "pipeline/stage_worker.h"
#include "rpc/in_process_transport.h"
#include "rpc/thrift_transport.h"

namespace pw::pipeline {

// How the stages of an embedded pipeline talk: through memory, or through Thrift on loopback (as
// separate processes would; for tests and `--transport thrift`).
enum class StageLinks { InProcess, Thrift };

struct PipelineOptions {
  ScheduleSpec spec;
  std::vector<kernels::Device> devices;   // one per stage
  RecomputeMode recompute = RecomputeMode::None;
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  models::OptimizerConfig optimizer;
  std::uint64_t seed = 0;
  StageLinks links = StageLinks::InProcess;
  int replica = 0;   // which data-parallel replica this pipeline is (trace spans)
  models::Objective objective = models::Objective::SoftmaxCrossEntropy;
};

struct PipelineStepResult {
  double loss = 0.0;   // mean over the mini-batch
  std::int64_t correct = 0;
  std::int64_t samples = 0;
  double wall_seconds = 0.0;
  std::vector<double> stage_busy_seconds;
  std::vector<StageStepResult> stages;   // everything each stage measured
};

class PipelineTrainer {
 public:
  // `partition` has one range per virtual stage (stages * chunks), in model order.
  PipelineTrainer(const partition::ModelDescription& model, const partition::Partition& partition,
                  PipelineOptions options);
  ~PipelineTrainer();

  PipelineStepResult train_step(const models::data::Batch& batch);
  // Makes every pending wait of every stage throw AbortedError (another replica failed).
  void abort(const std::string& reason) { abort_all(reason); }
  models::EvalResult evaluate(models::data::DataLoader& loader, std::int64_t max_batches = -1);

  int stages() const { return options_.spec.stages; }
  std::vector<std::int64_t> stage_peak_memory() const;
  std::vector<models::Layer*> stage_layers(int stage);   // the stage's chunks
  StageExecutor& executor(int stage) { return *executors_.at(static_cast<std::size_t>(stage)); }
  // Every stage's parameters by their whole-model names (tied copies appear once per holder).
  std::vector<std::pair<std::string, models::Parameter*>> named_parameters();

 private:
  void abort_all(const std::string& reason);
  void reset_all();

  PipelineOptions options_;
  rpc::InProcessHub hub_;
  std::vector<std::unique_ptr<rpc::Transport>> transports_;
  std::vector<std::unique_ptr<StageExecutor>> executors_;
  std::vector<std::unique_ptr<StageWorker>> workers_;
  std::int64_t step_ = 0;
};

}  // namespace pw::pipeline
