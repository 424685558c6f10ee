#pragma once
// The layers of one stage (one rank) whose rows live on parameter servers, registered as they are
// built, and what the stage executor calls in its optimizer step (pipeline::RemoteRowsSync): the
// registered layers' gradient norm and scale, their pushes as this rank's worker, the step-ahead
// prefetch of the next batch's rows, and the flush before an evaluation. With several replicas
// and a replica exchange set, the norm is that of the replicas' gradients summed by key, as the
// servers apply them (replica_rows_norm.h).
//
// A job's layer factories are shared by every rank (ranks may be threads of one process), so a
// factory finds the registry of the stage being built through the BuildScope open on its thread.
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "dataparallel/ps/remote_rows.h"
#include "pipeline/remote_rows_sync.h"

namespace pw::dp {

class RemoteRowsRegistry final : public pipeline::RemoteRowsSync {
 public:
  // The ids a registered layer will look up, from a micro-batch of the model's input.
  using IdsFromModelInput = std::function<kernels::Tensor(const kernels::Tensor& model_input)>;
  // Sends this replica's pending rows (one entry per registered layer, in registration order) to
  // the stage's other replicas and returns every replica's, by replica (its own included). Every
  // replica of the stage calls it once per step.
  using ReplicaExchange =
      std::function<std::vector<std::vector<PendingRows>>(const std::vector<PendingRows>& mine)>;

  // `worker`: the stage's replica, the worker its pushes count for on the servers.
  explicit RemoteRowsRegistry(int worker = 0);
  RemoteRowsRegistry(const RemoteRowsRegistry&) = delete;
  RemoteRowsRegistry& operator=(const RemoteRowsRegistry&) = delete;

  // While one is open, layers the parameter-server module builds on this thread register with
  // `registry`. Scopes nest; the innermost wins.
  class BuildScope {
   public:
    explicit BuildScope(RemoteRowsRegistry& registry);
    ~BuildScope();
    BuildScope(const BuildScope&) = delete;
    BuildScope& operator=(const BuildScope&) = delete;

   private:
    RemoteRowsRegistry* previous_;
  };
  // The registry of the innermost BuildScope open on this thread; nullptr outside any.
  static RemoteRowsRegistry* building();

  // Registers `rows` (a layer of this stage, which outlives the registry's use) and makes it this
  // registry's worker. With `ids`, prefetch() hands it its ids of the next step's micro-batches;
  // without, its forward pulls its rows when it runs.
  void add(RemoteRows& rows, IdsFromModelInput ids = {});
  std::size_t size() const { return entries_.size(); }
  int worker() const { return worker_; }

  // After the servers were restored from a checkpoint (RemoteRows::reconnect on each).
  void reconnect();
  // The job failed elsewhere (RemoteRows::abort on each; from any thread).
  void abort(const std::string& why) noexcept;
  // With replicas > 1: gradient_sum_of_squares() then returns the squared norm of the replicas'
  // summed gradients (the same figure on every replica), found through `exchange`. Without one it
  // is this replica's own.
  void set_replica_exchange(ReplicaExchange exchange) { exchange_ = std::move(exchange); }

  double gradient_sum_of_squares() override;
  void scale_gradients(double factor) override;
  void finish_step(RemoteGradients what) override;
  void prefetch(const std::vector<kernels::Tensor>& next_micro_batches) override;
  void flush() override;

 private:
  struct Entry {
    RemoteRows* rows;
    IdsFromModelInput ids;
  };
  int worker_;
  std::vector<Entry> entries_;   // in the order they were built
  ReplicaExchange exchange_;
};

}  // namespace pw::dp
