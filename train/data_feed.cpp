#include "train/data_feed.h"

#include <algorithm>
#include <cstring>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include "core/error.h"
#include "kernels/half_float.h"
#include "kernels/ops/half_support.h"
#include "models/data/sampler.h"

namespace pw::train {

using models::data::Batch;
using models::data::DataParts;

using models::data::reads_inputs;
using models::data::reads_labels;

Batch gather_rows(const models::data::Dataset* dataset, const kernels::Shape& sample_shape, DataParts parts,
                  const std::vector<std::int64_t>& indices, tbb::task_group_context& context,
                  std::optional<std::int64_t> epoch, GatherTarget target) {
  const auto count = static_cast<std::int64_t>(indices.size());
  Batch batch;
  if (parts == DataParts::None) return batch;
  PW_CHECK(dataset != nullptr, "a rank that reads data has no data set");
  PW_CHECK(target.input_dtype == kernels::DType::F32 || kernels::is_half(target.input_dtype),
           "the loader writes F32, BF16 or F16 inputs, not " << kernels::dtype_name(target.input_dtype));
  kernels::Shape shape{count};
  shape.insert(shape.end(), sample_shape.begin(), sample_shape.end());
  const std::int64_t sample_numel = kernels::shape_numel(sample_shape);
  const auto make = [&](const kernels::Shape& s, kernels::DType dtype) {
    return target.buffers != nullptr ? target.buffers->acquire(s, dtype) : kernels::Tensor::empty(s, dtype);
  };
  char* images = nullptr;
  std::int64_t* labels = nullptr;
  if (reads_inputs(parts)) {
    batch.images = make(shape, target.input_dtype);
    images = static_cast<char*>(batch.images.raw());
  }
  if (reads_labels(parts)) {
    batch.labels = make({count}, kernels::DType::I64);
    labels = batch.labels.data<std::int64_t>();
  }
  const std::size_t element_bytes = kernels::dtype_size(target.input_dtype);
  const bool narrow = target.input_dtype != kernels::DType::F32;
  tbb::parallel_for(
      tbb::blocked_range<std::int64_t>(0, count),
      [&](const tbb::blocked_range<std::int64_t>& range) {
        // 16-bit inputs: each sample is made in float, then rounded once (ties to even), as the
        // first layer would round a float input.
        std::vector<float> scratch(narrow && images != nullptr ? static_cast<std::size_t>(sample_numel) : 0);
        for (std::int64_t i = range.begin(); i != range.end(); ++i) {
          const auto index = indices[static_cast<std::size_t>(i)];
          char* row = images != nullptr ? images + static_cast<std::size_t>(i * sample_numel) * element_bytes : nullptr;
          float* image = row == nullptr ? nullptr : narrow ? scratch.data() : reinterpret_cast<float*>(row);
          if (image != nullptr && labels != nullptr) {
            if (epoch) dataset->fill_in_epoch(*epoch, index, image, labels[i]);
            else dataset->fill(index, image, labels[i]);
          } else if (image != nullptr) {
            if (epoch) dataset->fill_image_in_epoch(*epoch, index, image);
            else dataset->fill_image(index, image);
          } else {
            labels[i] = epoch ? dataset->fill_label_in_epoch(*epoch, index) : dataset->fill_label(index);
          }
          if (image != nullptr && narrow) {
            auto* out = reinterpret_cast<std::uint16_t*>(row);
            const bool bf16 = target.input_dtype == kernels::DType::BF16;
            for (std::int64_t k = 0; k < sample_numel; ++k)
              out[k] = bf16 ? kernels::float_to_bf16(scratch[static_cast<std::size_t>(k)])
                            : kernels::float_to_f16(scratch[static_cast<std::size_t>(k)]);
          }
        }
      },
      context);
  return batch;
}

namespace {

kernels::Tensor rows_of(const kernels::Tensor& t, const std::vector<std::int64_t>& rows) {
  kernels::Shape shape = t.shape();
  shape[0] = static_cast<std::int64_t>(rows.size());
  auto out = kernels::Tensor::empty(shape, t.dtype(), kernels::Device::cpu(0));
  const auto host = t.to(kernels::Device::cpu(0));
  const std::size_t row_bytes = host.nbytes() / static_cast<std::size_t>(host.dim(0));
  const auto* src = static_cast<const std::uint8_t*>(host.raw());
  auto* dst = static_cast<std::uint8_t*>(out.raw());
  for (std::size_t i = 0; i < rows.size(); ++i)
    std::memcpy(dst + i * row_bytes, src + static_cast<std::size_t>(rows[i]) * row_bytes, row_bytes);
  return out;
}

}  // namespace

Batch local_part(const Batch& global, int micro_batches, int replicas, int replica, DataParts parts) {
  PW_INPUT_CHECK(!reads_inputs(parts) || (global.images.defined() && global.images.ndim() >= 1),
                 "the batch has no inputs; the first stage needs them");
  PW_INPUT_CHECK(!reads_labels(parts) || (global.labels.defined() && global.labels.ndim() == 1),
                 "the batch has no labels (a 1-d tensor); the last stage needs them");
  PW_INPUT_CHECK(!global.images.defined() || !global.labels.defined() || global.images.dim(0) == global.labels.dim(0),
                 "the batch holds " << global.images.dim(0) << " inputs but " << global.labels.dim(0) << " labels");
  if (parts == DataParts::None) return {};
  const std::int64_t n = global.labels.defined() ? global.labels.dim(0) : global.images.dim(0);
  PW_INPUT_CHECK(n % (static_cast<std::int64_t>(micro_batches) * replicas) == 0,
                 "a batch of " << n << " does not split into " << micro_batches << " equal micro-batches x " << replicas
                               << " replicas");
  const std::int64_t micro = n / micro_batches;
  const std::int64_t slice = micro / replicas;
  std::vector<std::int64_t> rows;
  for (int m = 0; m < micro_batches; ++m)
    for (std::int64_t i = 0; i < slice; ++i) rows.push_back(m * micro + replica * slice + i);
  Batch local;
  if (reads_inputs(parts)) local.images = replicas == 1 ? global.images : rows_of(global.images, rows);
  if (reads_labels(parts)) local.labels = replicas == 1 ? global.labels : rows_of(global.labels, rows);
  return local;
}

TrainFeed::TrainFeed(const models::data::Dataset* dataset, FeedShape shape, std::int64_t global_batch,
                     int micro_batches, std::uint64_t seed, int prefetch, int loader_threads)
    : dataset_(dataset),
      shape_(std::move(shape)),
      global_batch_(global_batch),
      micro_batches_(micro_batches),
      seed_(seed),
      prefetch_(prefetch),
      loader_arena_(loader_threads > 0 ? std::make_unique<tbb::task_arena>(loader_threads) : nullptr),
      buffers_(std::make_unique<models::data::BatchBuffers>(shape_.memory)) {
  PW_CHECK(loader_threads >= 0, "loader threads " << loader_threads << " must be 0 or more");
  PW_INPUT_CHECK(global_batch_ >= 1, "batch size " << global_batch_ << " is not valid; expected at least 1");
  PW_CHECK(global_batch_ % (static_cast<std::int64_t>(micro_batches_) * shape_.replicas) == 0,
           "global batch " << global_batch_ << " does not split into " << micro_batches_ << " micro-batches x "
                           << shape_.replicas << " replicas");
  PW_CHECK(shape_.parts == DataParts::None || dataset_ != nullptr, "a rank that reads data has no data set");
}

void TrainFeed::start_epoch(std::int64_t epoch, std::int64_t first_batch, std::int64_t end_batch) {
  prefetcher_.reset();
  epoch_ = epoch;
  // The order a single replica's DataLoader reads: the same batches whatever the job's shape.
  order_ = models::data::shard_epoch_indices(shape_.dataset_size, models::data::Shuffle::Yes, seed_, epoch, {0, 1});
  PW_CHECK(first_batch >= 0 && first_batch <= batches_per_epoch(),
           "batch " << first_batch << " of an epoch of " << batches_per_epoch());
  next_ = first_batch;
  end_ = end_batch < 0 ? batches_per_epoch() : std::min(end_batch, batches_per_epoch());
  PW_CHECK(end_ >= first_batch, "batches " << first_batch << " to " << end_ << " of an epoch");
  if (prefetch_ == 0 || shape_.parts == DataParts::None || end_ == first_batch) return;
  prefetcher_ = std::make_unique<models::data::BatchPrefetcher>(
      end_ - first_batch, prefetch_,
      [this, first_batch](std::int64_t b, tbb::task_group_context& context) { return assemble(first_batch + b, context); },
      loader_arena_.get());
}

Batch TrainFeed::assemble(std::int64_t batch, tbb::task_group_context& context) const {
  const std::int64_t micro = global_batch_ / micro_batches_;
  const std::int64_t slice = micro / shape_.replicas;
  std::vector<std::int64_t> rows;
  rows.reserve(static_cast<std::size_t>(slice * micro_batches_));
  for (int m = 0; m < micro_batches_; ++m) {
    const std::int64_t begin = batch * global_batch_ + m * micro + shape_.replica * slice;
    rows.insert(rows.end(), order_.begin() + begin, order_.begin() + begin + slice);
  }
  return gather_rows(dataset_, shape_.sample_shape, shape_.parts, rows, context, epoch_,
                     {shape_.input_dtype, buffers_.get()});
}

std::optional<Batch> TrainFeed::next() {
  if (prefetcher_) return prefetcher_->next();
  if (next_ >= end_) return std::nullopt;
  tbb::task_group_context context;
  if (loader_arena_) return loader_arena_->execute([&] { return assemble(next_++, context); });
  return assemble(next_++, context);
}

EvalFeed::EvalFeed(const models::data::Dataset* dataset, FeedShape shape, std::int64_t batch,
                   std::int64_t max_batches)
    : dataset_(dataset), shape_(std::move(shape)), batch_(std::max<std::int64_t>(1, batch)),
      max_batches_(max_batches), next_(shape_.replica),
      buffers_(std::make_unique<models::data::BatchBuffers>(shape_.memory)) {}

std::int64_t EvalFeed::batch_count() const {
  const std::int64_t all = (shape_.dataset_size + batch_ - 1) / batch_;
  return max_batches_ >= 0 ? std::min(all, max_batches_) : all;
}

std::optional<std::pair<std::int64_t, Batch>> EvalFeed::next() {
  if (next_ >= batch_count()) return std::nullopt;
  const std::int64_t b = next_;
  next_ += shape_.replicas;
  std::vector<std::int64_t> rows;
  for (std::int64_t i = b * batch_; i < std::min(shape_.dataset_size, (b + 1) * batch_); ++i) rows.push_back(i);
  tbb::task_group_context context;
  auto batch = gather_rows(dataset_, shape_.sample_shape, shape_.parts, rows, context, std::nullopt,
                           {shape_.input_dtype, buffers_.get()});
  // A rank that reads nothing still needs the batch's size to know what it evaluates.
  if (!batch.labels.defined() && !batch.images.defined())
    batch.labels = kernels::Tensor::empty({0}, kernels::DType::I64);
  return std::make_pair(b, std::move(batch));
}

}  // namespace pw::train
