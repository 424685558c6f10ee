#include "models/data/data_loader.h"

#include <algorithm>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include "core/error.h"
#include "models/data/batch_prefetcher.h"

namespace pw::models::data {
namespace {

// Fills batch `batch_index` of `epoch_indices`; each sample writes only its own slice.
Batch assemble_batch(const Dataset& dataset, const kernels::Shape& sample_shape,
                     const std::vector<std::int64_t>& epoch_indices, std::int64_t batch_size, std::int64_t batch_index,
                     tbb::task_group_context& context) {
  const std::int64_t begin = batch_index * batch_size;
  const std::int64_t count = std::min<std::int64_t>(batch_size, static_cast<std::int64_t>(epoch_indices.size()) - begin);
  const std::int64_t* indices = epoch_indices.data() + begin;
  kernels::Shape shape{count};
  shape.insert(shape.end(), sample_shape.begin(), sample_shape.end());
  Batch batch{kernels::Tensor::empty(shape, kernels::DType::F32), kernels::Tensor::empty({count}, kernels::DType::I64)};
  const std::int64_t sample_numel = kernels::shape_numel(sample_shape);
  float* images = batch.images.data<float>();
  std::int64_t* labels = batch.labels.data<std::int64_t>();
  tbb::parallel_for(
      tbb::blocked_range<std::int64_t>(0, count),
      [&](const tbb::blocked_range<std::int64_t>& range) {
        for (std::int64_t i = range.begin(); i != range.end(); ++i) {
          dataset.fill(indices[i], images + i * sample_numel, labels[i]);
        }
      },
      context);
  return batch;
}

}  // namespace

DataLoader::DataLoader(const Dataset& dataset, std::int64_t batch_size, Shuffle shuffle, std::uint64_t seed,
                       LastBatch last, Shard shard, int prefetch)
    : dataset_(dataset),
      batch_size_(batch_size),
      shuffle_(shuffle),
      seed_(seed),
      last_(last),
      shard_(shard),
      prefetch_(prefetch),
      sample_shape_(dataset.sample_shape()) {
  PW_INPUT_CHECK(batch_size_ >= 1, "batch size " << batch_size_ << " is not valid; expected at least 1");
  PW_INPUT_CHECK(prefetch_ >= 0, "prefetch depth " << prefetch_ << " is not valid; expected 0 (none) or more");
  check_shard(shard_);
}

DataLoader::~DataLoader() = default;

std::int64_t DataLoader::batches_per_epoch() const {
  if (last_ == LastBatch::Drop) {
    // The smallest shard's count, so that every replica runs the same number of steps.
    return dataset_.size() / shard_.count / batch_size_;
  }
  const SliceBounds slice = shard_slice(dataset_.size(), shard_);
  return (slice.end - slice.begin + batch_size_ - 1) / batch_size_;
}

void DataLoader::start_epoch(std::int64_t epoch) {
  prefetcher_.reset();   // abandons the previous epoch before its indices change
  indices_ = shard_epoch_indices(dataset_.size(), shuffle_, seed_, epoch, shard_);
  next_batch_ = 0;
  epoch_started_ = true;
  if (prefetch_ == 0) return;
  prefetcher_ = std::make_unique<BatchPrefetcher>(
      batches_per_epoch(), prefetch_, [this](std::int64_t b, tbb::task_group_context& context) {
        return assemble_batch(dataset_, sample_shape_, indices_, batch_size_, b, context);
      });
}

std::optional<Batch> DataLoader::next() {
  PW_CHECK(epoch_started_, "DataLoader::next() called before start_epoch()");
  if (prefetcher_) return prefetcher_->next();
  if (next_batch_ >= batches_per_epoch()) return std::nullopt;
  tbb::task_group_context context;
  return assemble_batch(dataset_, sample_shape_, indices_, batch_size_, next_batch_++, context);
}

}  // namespace pw::models::data
