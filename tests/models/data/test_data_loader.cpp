#include <algorithm>
#include <chrono>
#include <numeric>
#include <set>
#include <thread>

#include <boost/test/unit_test.hpp>

#include "models/data/data_loader.h"

namespace pw::models::data {
namespace {

// Sample i is the image {i, -i} with label i % 10, so batches show which samples they hold.
class IndexDataset : public Dataset {
 public:
  explicit IndexDataset(std::int64_t size, std::chrono::microseconds delay = {}) : size_(size), delay_(delay) {}
  std::int64_t size() const override { return size_; }
  kernels::Shape sample_shape() const override { return {1, 1, 2}; }
  int num_classes() const override { return 10; }
  std::string name() const override { return "index"; }
  void fill(std::int64_t index, float* image_out, std::int64_t& label_out) const override {
    if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
    if (index == fail_at_) throw std::runtime_error("sample " + std::to_string(index) + " is broken");
    image_out[0] = static_cast<float>(index);
    image_out[1] = -static_cast<float>(index);
    label_out = index % 10;
  }
  std::int64_t fail_at_ = -1;

 private:
  std::int64_t size_;
  std::chrono::microseconds delay_;
};

// The sample indices of every batch of one epoch, checking each batch's layout on the way.
std::vector<std::vector<std::int64_t>> read_epoch(DataLoader& loader, std::int64_t epoch) {
  loader.start_epoch(epoch);
  std::vector<std::vector<std::int64_t>> batches;
  while (auto batch = loader.next()) {
    const std::int64_t n = batch->images.dim(0);
    BOOST_REQUIRE(batch->images.shape() == (kernels::Shape{n, 1, 1, 2}));
    BOOST_REQUIRE(batch->images.dtype() == kernels::DType::F32);
    BOOST_REQUIRE(batch->labels.shape() == (kernels::Shape{n}));
    BOOST_REQUIRE(batch->labels.dtype() == kernels::DType::I64);
    BOOST_REQUIRE(batch->images.device() == kernels::Device::cpu());
    const float* images = batch->images.data<float>();
    const std::int64_t* labels = batch->labels.data<std::int64_t>();
    std::vector<std::int64_t> indices;
    for (std::int64_t i = 0; i < n; ++i) {
      const auto index = static_cast<std::int64_t>(images[2 * i]);
      BOOST_REQUIRE(images[2 * i + 1] == -images[2 * i]);
      BOOST_REQUIRE(labels[i] == index % 10);
      indices.push_back(index);
    }
    batches.push_back(indices);
  }
  BOOST_TEST(static_cast<std::int64_t>(batches.size()) == loader.batches_per_epoch());
  BOOST_TEST(!loader.next().has_value());   // stays over
  return batches;
}

std::vector<std::int64_t> flatten(const std::vector<std::vector<std::int64_t>>& batches) {
  std::vector<std::int64_t> all;
  for (const auto& b : batches) all.insert(all.end(), b.begin(), b.end());
  return all;
}

std::vector<std::int64_t> sorted(std::vector<std::int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

std::vector<std::int64_t> iota(std::int64_t n) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), std::int64_t{0});
  return v;
}

BOOST_AUTO_TEST_SUITE(data_loader)

BOOST_AUTO_TEST_CASE(unshuffled_batches_are_in_order) {
  IndexDataset set(10);
  DataLoader loader(set, 4, Shuffle::No, 0, LastBatch::Keep);
  const auto batches = read_epoch(loader, 0);
  BOOST_REQUIRE(batches.size() == 3u);
  BOOST_TEST(batches[0] == (std::vector<std::int64_t>{0, 1, 2, 3}), boost::test_tools::per_element());
  BOOST_TEST(batches[2] == (std::vector<std::int64_t>{8, 9}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(every_sample_once_per_epoch) {
  IndexDataset set(1001);
  DataLoader loader(set, 32, Shuffle::Yes, 11, LastBatch::Keep);
  for (std::int64_t epoch = 0; epoch < 3; ++epoch) {
    BOOST_TEST(sorted(flatten(read_epoch(loader, epoch))) == iota(1001), boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_CASE(same_seed_and_epoch_give_same_batches_whatever_the_prefetch) {
  IndexDataset set(500);
  DataLoader reference(set, 16, Shuffle::Yes, 77, LastBatch::Drop, {0, 1}, 0);
  const auto expected = read_epoch(reference, 4);
  for (int prefetch : {1, 2, 8}) {
    DataLoader loader(set, 16, Shuffle::Yes, 77, LastBatch::Drop, {0, 1}, prefetch);
    BOOST_TEST(flatten(read_epoch(loader, 4)) == flatten(expected), boost::test_tools::per_element());
  }
  // Re-reading an epoch, after another one, repeats it.
  read_epoch(reference, 5);
  BOOST_TEST(flatten(read_epoch(reference, 4)) == flatten(expected), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(epochs_and_seeds_change_the_order) {
  IndexDataset set(500);
  DataLoader loader(set, 50, Shuffle::Yes, 1, LastBatch::Keep);
  DataLoader other_seed(set, 50, Shuffle::Yes, 2, LastBatch::Keep);
  const auto epoch0 = flatten(read_epoch(loader, 0));
  BOOST_TEST(epoch0 != flatten(read_epoch(loader, 1)));
  BOOST_TEST(epoch0 != flatten(read_epoch(other_seed, 0)));
  BOOST_TEST(epoch0 != iota(500));
}

BOOST_AUTO_TEST_CASE(last_batch_drop_and_keep) {
  IndexDataset set(10);
  DataLoader drop(set, 4, Shuffle::Yes, 3, LastBatch::Drop);
  DataLoader keep(set, 4, Shuffle::Yes, 3, LastBatch::Keep);
  BOOST_TEST(drop.batches_per_epoch() == 2);
  BOOST_TEST(keep.batches_per_epoch() == 3);
  const auto dropped = read_epoch(drop, 0);
  const auto kept = read_epoch(keep, 0);
  for (const auto& b : dropped) BOOST_TEST(b.size() == 4u);
  BOOST_REQUIRE(kept.size() == 3u);
  BOOST_TEST(kept.back().size() == 2u);
  // Same order; Drop only leaves out the short tail.
  const auto kept_flat = flatten(kept);
  BOOST_TEST(flatten(dropped) == std::vector<std::int64_t>(kept_flat.begin(), kept_flat.begin() + 8),
             boost::test_tools::per_element());

  IndexDataset exact(12);
  DataLoader exact_drop(exact, 4, Shuffle::No, 0, LastBatch::Drop);
  DataLoader exact_keep(exact, 4, Shuffle::No, 0, LastBatch::Keep);
  BOOST_TEST(exact_drop.batches_per_epoch() == 3);
  BOOST_TEST(exact_keep.batches_per_epoch() == 3);
}

BOOST_AUTO_TEST_CASE(shards_are_disjoint_and_cover_the_epoch) {
  IndexDataset set(103);
  const int count = 4;
  std::vector<std::int64_t> all;
  for (int index = 0; index < count; ++index) {
    DataLoader loader(set, 8, Shuffle::Yes, 21, LastBatch::Keep, {index, count});
    const auto part = flatten(read_epoch(loader, 6));
    BOOST_TEST(part.size() >= 25u);
    BOOST_TEST(part.size() <= 26u);
    all.insert(all.end(), part.begin(), part.end());
  }
  BOOST_TEST(sorted(all) == iota(103), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(dropping_the_last_batch_keeps_shards_in_step) {
  // Shards of 103 samples hold 25 or 26; with batch 13 Keep would give 2 batches each, and with
  // batch 5 Drop the 26-sample shards must not run a sixth step the others lack.
  IndexDataset set(103);
  for (int index = 0; index < 4; ++index) {
    DataLoader loader(set, 5, Shuffle::Yes, 21, LastBatch::Drop, {index, 4});
    BOOST_TEST(loader.batches_per_epoch() == 5);
    BOOST_TEST(read_epoch(loader, 0).size() == 5u);
  }
}

BOOST_AUTO_TEST_CASE(destroying_mid_epoch_does_not_hang) {
  IndexDataset slow(10000, std::chrono::microseconds(200));
  for (int prefetch : {1, 4}) {
    DataLoader loader(slow, 64, Shuffle::Yes, 1, LastBatch::Drop, {0, 1}, prefetch);
    loader.start_epoch(0);
    BOOST_TEST(loader.next().has_value());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));   // let the queue fill up
  }
  {
    DataLoader never_read(slow, 64, Shuffle::Yes, 1, LastBatch::Drop);
    never_read.start_epoch(0);
  }
  DataLoader never_started(slow, 64, Shuffle::Yes, 1, LastBatch::Drop);
}

BOOST_AUTO_TEST_CASE(restarting_an_epoch_mid_way_starts_it_afresh) {
  IndexDataset set(300);
  DataLoader loader(set, 10, Shuffle::Yes, 8, LastBatch::Keep);
  const auto full = flatten(read_epoch(loader, 2));
  loader.start_epoch(2);
  loader.next();
  loader.next();
  BOOST_TEST(flatten(read_epoch(loader, 2)) == full, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(errors_while_filling_reach_the_reader) {
  for (int prefetch : {0, 2}) {
    IndexDataset set(100);
    set.fail_at_ = 42;
    DataLoader loader(set, 10, Shuffle::No, 0, LastBatch::Keep, {0, 1}, prefetch);
    loader.start_epoch(0);
    for (int i = 0; i < 4; ++i) BOOST_TEST(loader.next().has_value());
    BOOST_CHECK_THROW(loader.next(), std::runtime_error);
    if (prefetch > 0) BOOST_TEST(!loader.next().has_value());
  }
}

BOOST_AUTO_TEST_CASE(bad_arguments_are_input_errors) {
  IndexDataset set(10);
  BOOST_CHECK_THROW(DataLoader(set, 0, Shuffle::No, 0, LastBatch::Keep), InputError);
  BOOST_CHECK_THROW(DataLoader(set, 4, Shuffle::No, 0, LastBatch::Keep, {3, 3}), InputError);
  BOOST_CHECK_THROW(DataLoader(set, 4, Shuffle::No, 0, LastBatch::Keep, {0, 1}, -1), InputError);
  DataLoader not_started(set, 4, Shuffle::No, 0, LastBatch::Keep);
  BOOST_CHECK_THROW(not_started.next(), Error);
}

BOOST_AUTO_TEST_CASE(batches_real_images) {
  const auto set = make_synthetic_images(256, {3, 32, 32}, 10, 4);
  DataLoader loader(*set, 64, Shuffle::Yes, 5, LastBatch::Drop);
  loader.start_epoch(0);
  const auto batch = loader.next();
  BOOST_REQUIRE(batch.has_value());
  BOOST_TEST(batch->images.shape() == (kernels::Shape{64, 3, 32, 32}), boost::test_tools::per_element());
  // Each row of the batch is the sample the epoch order names.
  const auto order = epoch_order(256, Shuffle::Yes, 5, 0);
  std::vector<float> expected(3 * 32 * 32);
  std::int64_t label = 0;
  set->fill(order[1], expected.data(), label);
  const float* row = batch->images.data<float>() + 3 * 32 * 32;
  BOOST_TEST(std::vector<float>(row, row + expected.size()) == expected, boost::test_tools::per_element());
  BOOST_TEST(batch->labels.data<std::int64_t>()[1] == label);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
}  // namespace pw::models::data
