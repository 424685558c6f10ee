// TrainFeed on an image folder with images that do not decode, skipped (BadSamples::Skip): the
// replacements depend on the sample index alone, so every replica count and pipeline shape reads
// the same batches, bitwise, and the first stage's logs count each bad sample once.
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include <boost/test/unit_test.hpp>
#include <oneapi/tbb/task_arena.h>

#include "kernels/cuda_probe.h"
#include "models/data/bad_sample_log.h"
#include "tests/models/data/idx_test_files.h"
#include "tests/models/data/image_test_files.h"
#include "train/data_feed.h"

namespace pw::train {
namespace {

using models::data::Batch;
using models::data::BadSampleLog;
using models::data::DataParts;

using test::write_file;

bool same_bytes(const kernels::Tensor& a, const kernels::Tensor& b) {
  return a.defined() && b.defined() && a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

constexpr std::int64_t kSamples = 24;
constexpr std::int64_t kBatch = 8;
constexpr int kMicroBatches = 2;
constexpr std::uint64_t kSeed = 11;
const kernels::Shape kSampleShape{3, 12, 12};

// 24 training images in 3 classes, of which 4 do not decode: 5 (truncated JPEG), 6 and 7 (empty,
// and not an image: two in a row), 23 (the last, truncated: its replacement wraps round to 0).
const std::set<int> kBad{5, 6, 7, 23};

struct Folder {
  test::TempDir root;
  Folder() {
    for (int i = 0; i < kSamples; ++i) {
      const auto pixels = test::smooth_pixels(20 + i, 16 + 2 * i, 3, i);
      const std::string stem = root.file("train/c" + std::to_string(i / 8) + "/" + (i < 10 ? "0" : "") + std::to_string(i));
      auto jpeg = test::encode_jpeg(pixels, 20 + i, 16 + 2 * i, TJPF_RGB);
      if (i == 5 || i == 23) jpeg.resize(jpeg.size() / 2);
      if (i == 6) jpeg.clear();
      if (i == 7) jpeg = {'n', 'o', 't', ' ', 'a', 'n', ' ', 'i', 'm', 'a', 'g', 'e'};
      write_file(stem + ".jpg", jpeg);
    }
  }
  std::unique_ptr<models::data::Dataset> open(DataParts parts, std::shared_ptr<BadSampleLog> log) const {
    models::data::DatasetOptions options;
    options.data_dir = root.str();
    options.image_size = static_cast<int>(kSampleShape[1]);
    options.seed = kSeed;
    options.parts = parts;
    options.bad_samples = models::data::BadSamples::Skip;
    options.bad_sample_log = std::move(log);
    return models::data::open_dataset("image-folder", models::data::Split::Train, options);
  }
};

// Every batch of two epochs of one rank of a job of `replicas` replicas.
std::vector<Batch> read_epochs(const models::data::Dataset& set, DataParts parts, int replicas, int replica,
                               int prefetch = 0, int loader_threads = 0) {
  TrainFeed feed(&set, FeedShape{kSamples, kSampleShape, parts, replicas, replica}, kBatch, kMicroBatches, kSeed,
                 prefetch, loader_threads);
  std::vector<Batch> out;
  for (std::int64_t epoch = 0; epoch < 2; ++epoch) {
    feed.start_epoch(epoch);
    while (auto batch = feed.next()) out.push_back(std::move(*batch));
  }
  return out;
}

BOOST_AUTO_TEST_SUITE(data_feed)

BOOST_AUTO_TEST_CASE(skipped_samples_give_the_same_batches_for_any_replica_count_and_pipeline_shape) {
  const Folder folder;
  auto single_log = std::make_shared<BadSampleLog>();
  const auto single = read_epochs(*folder.open(DataParts::Both, single_log), DataParts::Both, 1, 0);
  BOOST_REQUIRE_EQUAL(single.size(), 2u * kSamples / kBatch);
  BOOST_TEST(single_log->count() == static_cast<std::int64_t>(kBad.size()));

  // Two replicas: each reads its rows of every global batch, as local_part cuts them.
  BadSampleLog united;
  for (int r = 0; r < 2; ++r) {
    auto log = std::make_shared<BadSampleLog>();
    const auto mine = read_epochs(*folder.open(DataParts::Both, log), DataParts::Both, 2, r);
    BOOST_REQUIRE_EQUAL(mine.size(), single.size());
    for (std::size_t b = 0; b < single.size(); ++b) {
      const Batch want = local_part(single[b], kMicroBatches, 2, r, DataParts::Both);
      BOOST_TEST_CONTEXT("replica " << r << ", batch " << b) {
        BOOST_TEST(same_bytes(mine[b].images, want.images));
        BOOST_TEST(same_bytes(mine[b].labels, want.labels));
      }
    }
    united.merge(log->names());
  }
  BOOST_TEST(united.count() == single_log->count());

  // Two stages: the first reads the images, the last the labels, which must be the replacements' too.
  auto first_log = std::make_shared<BadSampleLog>(), last_log = std::make_shared<BadSampleLog>();
  const auto inputs = read_epochs(*folder.open(DataParts::Inputs, first_log), DataParts::Inputs, 1, 0);
  const auto labels = read_epochs(*folder.open(DataParts::Labels, last_log), DataParts::Labels, 1, 0);
  for (std::size_t b = 0; b < single.size(); ++b) {
    BOOST_TEST(same_bytes(inputs[b].images, single[b].images));
    BOOST_TEST(same_bytes(labels[b].labels, single[b].labels));
  }
  BOOST_TEST(first_log->count() == single_log->count());
  BOOST_TEST(last_log->count() == 0);

  // The replacements' labels differ from the bad samples' own where the replacement is in another
  // class (7 -> 8, 23 -> 0): the labels read are not the folder's.
  const auto both = folder.open(DataParts::Both, nullptr);
  BOOST_TEST(both->fill_label_in_epoch(1, 7) == 1);
  BOOST_TEST(both->fill_label_in_epoch(1, 23) == 0);
}

// Records the largest arena that ever filled one of its samples.
class ArenaWatch final : public models::data::Dataset {
 public:
  explicit ArenaWatch(std::unique_ptr<models::data::Dataset> inner) : inner_(std::move(inner)) {}
  std::int64_t size() const override { return inner_->size(); }
  std::vector<std::int64_t> sample_shape() const override { return inner_->sample_shape(); }
  int num_classes() const override { return inner_->num_classes(); }
  std::string name() const override { return inner_->name(); }
  void fill(std::int64_t i, float* image, std::int64_t& label) const override {
    fill_in_epoch(0, i, image, label);
  }
  void fill_in_epoch(std::int64_t epoch, std::int64_t i, float* image, std::int64_t& label) const override {
    int seen = widest.load();
    const int now = tbb::this_task_arena::max_concurrency();
    while (now > seen && !widest.compare_exchange_weak(seen, now)) {
    }
    inner_->fill_in_epoch(epoch, i, image, label);
  }
  mutable std::atomic<int> widest{0};

 private:
  std::unique_ptr<models::data::Dataset> inner_;
};

BOOST_AUTO_TEST_CASE(the_loader_pool_and_prefetch_depth_change_no_batch) {
  const Folder folder;
  const auto reference = read_epochs(*folder.open(DataParts::Both, nullptr), DataParts::Both, 2, 1);
  for (const auto& [prefetch, threads] : {std::pair{0, 1}, {1, 1}, {4, 1}, {2, 3}, {3, 0}}) {
    const ArenaWatch set(folder.open(DataParts::Both, nullptr));
    const auto got = read_epochs(set, DataParts::Both, 2, 1, prefetch, threads);
    BOOST_TEST_CONTEXT("prefetch " << prefetch << ", loader threads " << threads) {
      BOOST_REQUIRE_EQUAL(got.size(), reference.size());
      for (std::size_t b = 0; b < got.size(); ++b) {
        BOOST_TEST(same_bytes(got[b].images, reference[b].images));
        BOOST_TEST(same_bytes(got[b].labels, reference[b].labels));
      }
      // The loader's own pool: its samples are filled in an arena of that many threads.
      if (threads > 0) BOOST_TEST(set.widest.load() == threads);
    }
  }
}

// 16-bit loader inputs are the float inputs rounded once (ties to even), as a first convolution
// would round them.
BOOST_AUTO_TEST_CASE(sixteen_bit_inputs_are_the_float_inputs_rounded_once) {
  const Folder folder;
  const auto set = folder.open(DataParts::Both, std::make_shared<BadSampleLog>());
  const std::vector<std::int64_t> rows{0, 1, 2, 3, 8, 9};
  tbb::task_group_context context;
  const auto f32 = gather_rows(set.get(), kSampleShape, DataParts::Both, rows, context, std::int64_t{1});
  for (const auto dtype : {kernels::DType::BF16, kernels::DType::F16}) {
    models::data::BatchBuffers buffers;
    const auto half = gather_rows(set.get(), kSampleShape, DataParts::Both, rows, context, std::int64_t{1},
                                  {dtype, &buffers});
    BOOST_TEST(same_bytes(half.labels, f32.labels));
    BOOST_TEST(same_bytes(half.images, f32.images.to(dtype)), kernels::dtype_name(dtype));
  }
}

// Loader buffers come back to the pool once the batch and every view of it (the micro-batches a
// GPU copy may still read) are gone, and not before.
BOOST_AUTO_TEST_CASE(loader_buffers_are_reused_only_when_nothing_holds_them) {
  for (const auto memory : {kernels::HostMemory::Pageable, kernels::HostMemory::Pinned}) {
    models::data::BatchBuffers buffers(memory);
    auto first = buffers.acquire({4, 3}, kernels::DType::F32);
    const void* first_bytes = first.raw();
    auto view = first.view(6, {2, 3});
    first = kernels::Tensor();
    auto second = buffers.acquire({4, 3}, kernels::DType::F32);
    BOOST_TEST(second.raw() != first_bytes);   // the view still holds the first
    view = kernels::Tensor();
    auto third = buffers.acquire({4, 3}, kernels::DType::F32);
    BOOST_TEST(third.raw() == first_bytes);
    BOOST_TEST(buffers.size() == 2u);
    // Free buffers of another shape are kept (a batch asks for inputs and labels) until the pool
    // is full; then the free ones go rather than keep every size ever asked for.
    second = kernels::Tensor();
    auto other = buffers.acquire({5, 3}, kernels::DType::F32);
    BOOST_TEST(buffers.size() == 3u);
    for (std::int64_t rows = 6; rows < 6 + 2 * static_cast<std::int64_t>(models::data::BatchBuffers::kMaxBuffers); ++rows)
      (void)buffers.acquire({rows, 3}, kernels::DType::F32);
    BOOST_TEST(buffers.size() <= models::data::BatchBuffers::kMaxBuffers + 1);
    BOOST_TEST(other.is_pinned() == (memory == kernels::HostMemory::Pinned && kernels::cuda_device_count() > 0));
  }
}

// Over an epoch with batches built ahead, the feed keeps a bounded set of buffers: as many as the
// batches alive at once, not one per batch.
BOOST_AUTO_TEST_CASE(a_feed_reuses_its_buffers_over_an_epoch) {
  const Folder folder;
  const auto set = folder.open(DataParts::Both, std::make_shared<BadSampleLog>());
  FeedShape shape{kSamples, kSampleShape, DataParts::Both, 1, 0};
  TrainFeed feed(set.get(), shape, kBatch / 2, kMicroBatches, kSeed, 2, 1);
  for (int epoch = 0; epoch < 3; ++epoch) {
    feed.start_epoch(epoch);
    while (auto batch = feed.next()) BOOST_TEST(batch->images.defined());
  }
  BOOST_TEST_MESSAGE(feed.buffer_count() << " buffers for " << 3 * feed.batches_per_epoch() << " batches");
  // Per batch an input and a label buffer; batches alive at once: at most the prefetch depth, one
  // being built, one handed out and one the queue hands over.
  BOOST_TEST(feed.buffer_count() <= 2u * 5u);
  BOOST_TEST(feed.buffer_count() < 2u * static_cast<std::size_t>(3 * feed.batches_per_epoch()));
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
}  // namespace pw::train
