#pragma once
// Data + model parallelism inside one process: `replicas` copies of a pipeline, each with its
// stages as threads, every stage averaging its gradients with the same stage of the other
// replicas (bucketed Gloo all-reduce over loopback, overlapping backward). The global batch is
// split evenly over the replicas; initial weights are broadcast from replica 0. Stages on GPUs
// all-reduce with NCCL instead (one GPU per replica of a stage).
#include <memory>
#include <vector>

#include "dataparallel/bucket_reducer.h"
#include "dataparallel/gloo_collective.h"
#include "dataparallel/nccl_collective.h"
#include "dataparallel/topology.h"
#include "pipeline/pipeline_trainer.h"
#include "rpc/store.h"

namespace pw::dp {

class HybridTrainer {
 public:
  // options.devices: one per rank, replica-major (replica r's stage s is devices[r * P + s]).
  HybridTrainer(const partition::ModelDescription& model, const partition::Partition& partition,
                pipeline::PipelineOptions options, int replicas, BucketOptions buckets);
  ~HybridTrainer();

  // The batch is the global mini-batch; loss and accuracy are over all of it.
  pipeline::PipelineStepResult train_step(const models::data::Batch& batch);
  models::EvalResult evaluate(models::data::DataLoader& loader, std::int64_t max_batches = -1);   // replica 0

  const Topology& topology() const { return topology_; }
  pipeline::PipelineTrainer& replica(int r) { return *replicas_.at(static_cast<std::size_t>(r)); }
  std::vector<std::int64_t> stage_peak_memory() const;   // per stage, the largest over replicas
  std::vector<ReduceStats> reduce_stats() const;          // per rank (replica-major); empty with one replica

 private:
  Topology topology_;
  rpc::InMemoryStore store_;
  std::vector<std::unique_ptr<pipeline::PipelineTrainer>> replicas_;
  std::vector<std::shared_ptr<Collective>> collectives_;   // per rank: Gloo on CPU, NCCL on GPU
  std::vector<std::unique_ptr<BucketReducer>> reducers_;       // per rank
};

// Every member of each stage group runs `body(rank)` on its own thread (collectives need all
// members at once); rethrows the first failure.
void run_per_rank(int ranks, const std::function<void(int)>& body);

}  // namespace pw::dp
