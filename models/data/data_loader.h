#pragma once
// Batches of a Dataset in a seeded order per epoch, optionally one shard per data-parallel replica,
// assembled ahead of time on a background thread (oneTBB queue, samples filled with parallel_for).
//
//   DataLoader loader(dataset, 64, Shuffle::Yes, seed, LastBatch::Drop);
//   for (std::int64_t epoch = 0; epoch < epochs; ++epoch) {
//     loader.start_epoch(epoch);
//     while (auto batch = loader.next()) train_step(batch->images, batch->labels);
//   }
//
// Batches depend only on (dataset, batch size, shuffle, seed, epoch, shard, last-batch policy),
// never on prefetch depth or thread count.
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "models/data/dataset.h"
#include "models/data/sampler.h"

namespace pw::models::data {

class BatchPrefetcher;

// What happens to an epoch's final batch when fewer than batch_size samples remain.
// With Drop every shard yields the same number of batches, which keeps data-parallel replicas in
// step; with Keep every sample of the shard is read, and shard batch counts may differ by one.
enum class LastBatch { Drop, Keep };

class DataLoader {
 public:
  // `dataset` must outlive the loader. prefetch: batches built ahead (0 builds each in next()).
  DataLoader(const Dataset& dataset, std::int64_t batch_size, Shuffle shuffle, std::uint64_t seed, LastBatch last,
             Shard shard = {0, 1}, int prefetch = 2);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Starts (or restarts, abandoning the current one) epoch `epoch`.
  void start_epoch(std::int64_t epoch);
  // The epoch's next batch, or nullopt once it is over. start_epoch must have been called.
  std::optional<Batch> next();
  std::int64_t batches_per_epoch() const;
  std::int64_t batch_size() const { return batch_size_; }

 private:
  const Dataset& dataset_;
  std::int64_t batch_size_;
  Shuffle shuffle_;
  std::uint64_t seed_;
  LastBatch last_;
  Shard shard_;
  int prefetch_;
  kernels::Shape sample_shape_;

  bool epoch_started_ = false;
  std::vector<std::int64_t> indices_;   // this shard's samples of the current epoch, in order
  std::int64_t next_batch_ = 0;          // used when prefetch_ == 0
  std::unique_ptr<BatchPrefetcher> prefetcher_;
};

}  // namespace pw::models::data
