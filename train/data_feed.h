#pragma once
// Between-graph data: each rank reads only what it feeds. Replica r's part of each global batch is
// the r-th of R equal slices of every global micro-batch (so a 2x2 job sees the micro-batches of
// a 1x4 one, and synchronised batch-norm equals the single replica); within a pipeline only the
// first stage reads inputs and only the last reads labels; a middle stage reads nothing.
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "models/data/batch_buffers.h"
#include "models/data/batch_prefetcher.h"
#include "models/data/dataset.h"

namespace pw::train {

struct FeedShape {
  std::int64_t dataset_size = 0;   // samples in the split (known on every rank, read or not)
  kernels::Shape sample_shape;
  models::data::DataParts parts = models::data::DataParts::Both;
  int replicas = 1;
  int replica = 0;
  // The inputs' dtype as the first layer takes them (BF16 or F16 halves the bytes loaded and copied;
  // fill() still computes in float and each value is rounded once, as the layer would round it),
  // and the host memory the batches are built in (Pinned when the first stage is on a GPU).
  kernels::DType input_dtype = kernels::DType::F32;
  kernels::HostMemory memory = kernels::HostMemory::Pageable;
};

// Training batches: the global batch of `global_batch` samples in a seeded order per epoch (the
// order a single-device run sees), of which this rank reads its replica's rows.
class TrainFeed {
 public:
  // `dataset` may be null when shape.parts is None.
  // `prefetch` whole batches are built ahead of the consumer (0: each when asked for), on
  // `loader_threads` threads of their own (0: the process's default oneTBB arena).
  TrainFeed(const models::data::Dataset* dataset, FeedShape shape, std::int64_t global_batch, int micro_batches,
            std::uint64_t seed, int prefetch = 2, int loader_threads = 0);
  std::int64_t batches_per_epoch() const { return shape_.dataset_size / global_batch_; }
  // From batch `first_batch` of the epoch on (a resumed job), the earlier ones not read, up to
  // batch `end_batch` (exclusive; -1: the epoch's end), so a job that stops mid-epoch decodes
  // nothing it will not train on.
  void start_epoch(std::int64_t epoch, std::int64_t first_batch = 0, std::int64_t end_batch = -1);
  // Stops building batches ahead (and waits for the loader to leave); next() then reads on demand.
  void stop() { prefetcher_.reset(); }
  // This rank's part of the next global batch (tensors it does not read are left undefined), or
  // nullopt at the end of the epoch.
  std::optional<models::data::Batch> next();
  std::size_t buffer_count() const { return buffers_->size(); }   // host buffers made so far

 private:
  models::data::Batch assemble(std::int64_t batch, tbb::task_group_context& context) const;

  const models::data::Dataset* dataset_;
  FeedShape shape_;
  std::int64_t global_batch_;
  int micro_batches_;
  std::uint64_t seed_;
  int prefetch_;
  std::unique_ptr<tbb::task_arena> loader_arena_;   // the loader's own pool, when it has one
  std::vector<std::int64_t> order_;
  std::int64_t epoch_ = 0;
  std::int64_t next_ = 0;
  std::int64_t end_ = 0;
  std::unique_ptr<models::data::BatchBuffers> buffers_;   // outlives the prefetcher, which fills from it
  std::unique_ptr<models::data::BatchPrefetcher> prefetcher_;
};

// Evaluation batches of `batch` samples in file order; replica r takes batches r, r + R, ...
class EvalFeed {
 public:
  EvalFeed(const models::data::Dataset* dataset, FeedShape shape, std::int64_t batch, std::int64_t max_batches);
  std::int64_t batch_count() const;   // global test batches evaluated, over every replica
  // The next batch of this replica with its global index, or nullopt at the end.
  std::optional<std::pair<std::int64_t, models::data::Batch>> next();
  void restart() { next_ = shape_.replica; }

 private:
  const models::data::Dataset* dataset_;
  FeedShape shape_;
  std::int64_t batch_;
  std::int64_t max_batches_;
  std::int64_t next_;
  std::unique_ptr<models::data::BatchBuffers> buffers_;
};

// This rank's part of a global batch in memory, the rows TrainFeed would read: replica r's slice of
// each of the `micro_batches` micro-batches, inputs and labels as `parts` asks.
models::data::Batch local_part(const models::data::Batch& global, int micro_batches, int replicas, int replica,
                               models::data::DataParts parts);

// Where gather_rows writes: inputs in `input_dtype`, into buffers of `buffers` (fresh tensors
// without one).
struct GatherTarget {
  kernels::DType input_dtype = kernels::DType::F32;
  models::data::BatchBuffers* buffers = nullptr;
};

// Fills rows `indices` of `dataset` into a batch holding the parts `parts` asks for; with a
// training `epoch`, as that epoch's augmentation draws them (Dataset::fill_in_epoch).
models::data::Batch gather_rows(const models::data::Dataset* dataset, const kernels::Shape& sample_shape,
                                models::data::DataParts parts, const std::vector<std::int64_t>& indices,
                                tbb::task_group_context& context, std::optional<std::int64_t> epoch = std::nullopt,
                                GatherTarget target = {});

}  // namespace pw::train
