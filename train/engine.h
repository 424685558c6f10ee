#pragma once
// One rank's part of a job: its stage's layers and executor, its replica group (gradient buckets
// all-reduced while backward runs, batch-norm statistics kept equal), its parameter-server
// clients. Built the same way whether the ranks are threads of one process or processes on many
// hosts: an embedded job is N engines on a world of threads, a multi-process job one engine per
// process. Every method that exchanges figures (step, evaluate, save) is called by every rank.
#include <chrono>
#include <functional>
#include <map>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dataparallel/bucket_reducer.h"
#include "dataparallel/ps/remote_rows_registry.h"
#include "pipewright/fit.h"
#include "kernels/safetensors.h"
#include "models/data/dataset.h"
#include "models/trainer.h"
#include "pipeline/stage_executor.h"
#include "rpc/subgroup_transport.h"
#include "train/checkpoint.h"
#include "train/data_feed.h"
#include "train/flight_dump.h"
#include "train/job_plan.h"
#include "train/loss_scaler.h"
#include "train/parameter_servers.h"
#include "train/step_guard.h"
#include "train/world.h"

namespace pw::train {

// StepOutcome: pipewright/fit.h.

class Engine {
 public:
  // Builds this rank's stage; every rank of the job constructs its engine at the same time.
  // `links` (the world's) and `servers` (the job's parameter servers; nullptr: none) outlive the
  // engine: a JobSession (job_session.h) owns all three in that order.
  Engine(std::shared_ptr<const JobPlan> plan, RankLinks& links, ParameterServers* servers);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  int rank() const { return links_.rank(); }
  int stage() const { return links_.stage(); }
  int stage_of_piece(int piece) const { return pipeline::locate_virtual_stage(plan_.schedule, piece).stage; }
  int replica() const { return links_.replica(); }
  bool is_primary() const { return links_.rank() == 0; }
  kernels::Device device() const { return device_; }
  const partition::Partition& split() const { return partition_; }
  const JobPlan& plan() const { return plan_; }
  ParameterServers* parameter_servers() const { return servers_; }
  RankLinks& links() { return links_; }
  const RankLinks& links() const { return links_; }
  // Keeps this rank's flight record in DIR/flight-rank<R>.live while the engine lives (train/flight_dump.h).
  void keep_flight_record_in(const std::string& dir) { flight_registration_.keep_live_record_in(dir); }
  // What of the data this rank reads: inputs (first stage), labels (last), both, or none.
  models::data::DataParts data_parts() const;
  // How a loader builds this rank's batches: inputs in the dtype the first layer rounds them to
  // (16-bit under mixed precision when that layer is a convolution or a linear layer: half the
  // bytes, bitwise the same training), in pinned host memory when this rank's device is a GPU.
  kernels::DType loader_input_dtype() const;
  kernels::HostMemory loader_memory() const {
    return device_.is_cuda() ? kernels::HostMemory::Pinned : kernels::HostMemory::Pageable;
  }

  // One optimizer step on this rank's part of the global batch (images on the first stage, labels
  // on the last; see TrainFeed).
  // `primary_flags`: rank 0's value reaches every rank in the outcome (others pass 0).
  StepOutcome step(const models::data::Batch& local, double primary_flags = 0.0);
  // The batch the step after the coming step() trains on, given before that step() (fit does):
  // embedding rows on parameter servers are pulled for it while the coming step computes. Only
  // the first stage reads it; without it every step pulls its rows in its own forward.
  void prefetch(const models::data::Batch& next_local);
  std::int64_t steps_made() const { return step_; }
  // Forward-only over the test set, split over the replicas; the counts are summed.
  models::EvalResult evaluate(EvalFeed& feed);
  // Whether every parameter of every rank is finite (rows on parameter servers are not read).
  // Called by every rank; every rank gets the same answer.
  bool weights_finite();
  // Every stage's parameters and buffers by whole-model name, written by rank 0 (safetensors).
  void save(const std::string& path);
  // This rank's share of a checkpoint (train/checkpoint.h), copied to the host now: replica 0 writes
  // one file per model chunk with its parameters, buffers and optimizer state by whole-model name;
  // other replicas hold the same values and write nothing. With sharded optimizer state every
  // replica of the stage takes part in gathering the state whole first (call it on all of them).
  // `reuse`: an earlier checkpoint's parts, whose host tensors are copied into where they fit.
  std::vector<CheckpointPart> checkpoint_parts(std::vector<CheckpointPart> reuse = {}) const;
  // Loads this rank's tensors and optimizer state from a checkpoint by name, whatever layout saved
  // it, and continues at its step with its learning rate. InputError naming the file when a tensor
  // is missing, has another shape, or a file is damaged.
  void restore(const CheckpointManifest& manifest);
  // A world of threads recovered from a failed step (JobSession::run): the server-backed layers,
  // whose calls the failure aborted, reconnect and go on from where the servers stand.
  void after_recovery();
  void set_lr(double lr);
  double lr() const;
  const LossScaler& loss_scaler() const { return loss_scaler_; }
  // fp16 dynamic loss scaling: starts again at `scale` (a resumed job's --initial-loss-scale).
  void set_loss_scale(double scale) { loss_scaler_.restore(scale, 0); }
  // This rank's chunks of the model.
  std::vector<models::Layer*> layers();
  pipeline::StageExecutor& executor() { return *executor_; }
  // What this rank's stage measured in the last step (busy time, per-op seconds).
  const pipeline::StageStepResult& last_stage_result() const { return last_; }
  void reset_peak_memory();
  void synchronize();
  // With sharded optimizer state the last update's weights are all-gathered in the background
  // while the next step starts: returns once they all arrived. Whatever reads this rank's weights
  // outside step() calls it first (evaluate, save, checkpoint_parts, restore, weights_finite and
  // synchronize do).
  void await_weights() const;
  std::string describe() const;   // "rank 1 of 4: stage 1 of 2, replica 0 ... on cpu:1"

 private:
  void agree_on_config(rpc::Deadline deadline);
  void choose_partition(rpc::Deadline deadline);
  // This stage's chunks, its tied groups and its executor's config, before the executor is made.
  struct BuiltStage {
    pipeline::StageConfig config;
    std::vector<std::unique_ptr<models::Sequential>> chunks;
    std::vector<pipeline::TiedGroup> tied;
  };
  BuiltStage build_stage();
  // `tied`: weights shared with other stages, reduced whole even when the optimizer state is sharded.
  void join_replicas(const std::vector<models::Layer*>& stage_layers, const std::vector<pipeline::TiedGroup>& tied);
  // Sharded optimizer state: every sharded parameter's whole state, by whole-model name
  // ("<param>.exp_avg"); every replica of the stage calls it at once.
  std::map<std::string, kernels::Tensor> gather_sharded_state() const;
  // Mixed precision: the fp32 master weights the optimizer keeps apart from the 16-bit values
  // (sharded masters, gathered whole; offloaded whole masters, in host memory), by whole-model
  // name; every replica of the stage calls it at once.
  std::map<std::string, kernels::Tensor> gather_masters() const;
  // The fp32 masters of `named` (models::Optimizer::master_of), and sharded optimizer state: this
  // replica's slices of the state (and of the fp32 masters) of
  // `named`, from a checkpoint's whole tensors (`whole_state(name)`: the tensor stored under that
  // name, or throws).
  void restore_sharded_state(const std::vector<std::pair<std::string, models::Parameter*>>& named,
                             const std::function<kernels::Tensor(const std::string&)>& whole_state);
  void synchronise_batch_norm(const std::vector<models::Layer*>& stage_layers);
  void sync_buffers();
  std::vector<std::vector<double>> exchange(const std::vector<double>& values, int message, std::int64_t round);
  // The two halves of `exchange`: sends `values` to every other rank without waiting for theirs;
  // then collects every rank's (`values` at this rank's index), each wait up to the stage deadline.
  void send_figures(const std::vector<double>& values, int message, std::int64_t round);
  std::vector<std::vector<double>> collect_figures(const std::vector<double>& values, int message, std::int64_t round);
  // Rethrows the exception being handled with this rank's stage, the round and what it exchanged
  // with `peer`.
  [[noreturn]] void rethrow_exchange_failure(int message, std::int64_t round, int peer);
  double gather_auc(const std::vector<std::vector<double>>& figures, std::vector<double> scores,
                    const std::vector<double>& labels, std::int64_t round);
  kernels::NamedTensors gather_weights();
  rpc::Deadline deadline() const;

  std::shared_ptr<const JobPlan> shared_plan_;
  const JobPlan& plan_;   // *shared_plan_
  RankLinks& links_;
  ParameterServers* servers_;
  kernels::Device device_;
  partition::Partition partition_;
  std::unique_ptr<rpc::SubgroupTransport> pipeline_;   // this replica's stages as ranks 0..P-1
  // The stage's layers whose rows live on parameter servers (registered as they are built).
  std::unique_ptr<dp::RemoteRowsRegistry> remote_rows_;
  CancelSubscription remote_rows_cancel_;   // a failed job ends their calls to the servers
  std::shared_ptr<dp::Collective> collective_;          // this stage's replicas
  std::shared_ptr<dp::Collective> batch_norm_group_;    // --sync-batch-norm: the same, for statistics
  CancelSubscription batch_norm_cancel_;
  std::unique_ptr<dp::BucketReducer> reducer_;
  CancelSubscription reducer_cancel_;
  std::unique_ptr<StepGuard> step_guard_;
  // Calls the registry, the reducer and the step guard: declared after them, so it goes first.
  std::unique_ptr<pipeline::StageExecutor> executor_;
  FlightRegistration flight_registration_;   // of executor_'s recorder: declared after it, gone first
  LossScaler loss_scaler_;
  pipeline::StageStepResult last_;
  // When the previous step() returned: the time until the next one is this rank's own (loading,
  // host work), counted with its compute in StepOutcome::rank_own_seconds.
  // Reset by evaluate, save, checkpoint_parts and restore (their waits are for other ranks).
  mutable std::optional<std::chrono::steady_clock::time_point> last_step_end_;
  std::int64_t step_ = 0;
  std::int64_t evaluations_ = 0;
  std::int64_t gathers_ = 0;
  std::int64_t weight_checks_ = 0;
  std::int64_t row_exchanges_ = 0;   // the replicas' rows for parameter servers, shown to each other
};

}  // namespace pw::train
