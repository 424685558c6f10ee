#pragma once
// One stage of a pipeline whose stages are separate processes (on one host or many), possibly
// one of several data-parallel replicas: this rank builds only its own stage's layers and runs its
// StageExecutor on its replica's share of each global batch; per-step figures (loss, accuracy,
// busy time, peak memory) and evaluation results are exchanged so that every rank reports the
// same numbers; rank 0 gathers the weights for a checkpoint. World rank = replica * stages + stage.
#include <chrono>
#include <memory>
#include <vector>

#include "kernels/safetensors.h"
#include "models/data/data_loader.h"
#include "models/trainer.h"
#include "partition/model_description.h"
#include "pipeline/pipeline_trainer.h"
#include "pipeline/stage_executor.h"

namespace pw::pipeline {

class ProcessStage {
 public:
  // `options.devices` holds this rank's one device. `transport` carries activations and
  // gradients between this replica's stages (its ranks are the stages), `control` the small
  // messages between any two ranks of the job (figures, gathered weights).
  ProcessStage(const partition::ModelDescription& model, const partition::Partition& partition,
               PipelineOptions options, rpc::Transport& transport, rpc::Transport& control, int replicas = 1);

  PipelineStepResult train_step(const models::data::Batch& batch);
  models::EvalResult evaluate(models::data::DataLoader& loader, std::int64_t max_batches = -1);
  // Rank 0 returns every stage's parameters and buffers by whole-model name; the others send
  // theirs to rank 0 and return nothing. Every rank must call it.
  kernels::NamedTensors gather_weights();

  int stage() const { return executor_->config().stage; }
  int replica() const { return control_.rank() / stages(); }
  int replicas() const { return replicas_; }
  StageExecutor& executor() { return *executor_; }
  int stages() const { return executor_->config().spec.stages; }
  std::vector<models::Layer*> layers();   // this stage's chunks
  const std::vector<std::int64_t>& stage_peak_memory() const { return stage_peak_memory_; }   // last step's

 private:
  // Sends `values` to every other rank of the job and returns every rank's (this one's
  // included), by world rank.
  double gather_auc(const std::vector<std::vector<double>>& figures, std::vector<double> scores,
                    const std::vector<double>& labels, std::int64_t round);
  std::vector<std::vector<double>> exchange(const std::vector<double>& values, int message, std::int64_t round);
  rpc::Deadline deadline() const { return std::chrono::steady_clock::now() + options_.timeout; }

  PipelineOptions options_;
  rpc::Transport& transport_;
  rpc::Transport& control_;
  int replicas_;
  std::unique_ptr<StageExecutor> executor_;
  std::int64_t step_ = 0;
  std::int64_t evaluations_ = 0;
  std::int64_t gathers_ = 0;
  std::vector<std::int64_t> stage_peak_memory_;
};

}  // namespace pw::pipeline
