#include <vector>

#include <boost/test/unit_test.hpp>

#include "models/data/dataset.h"

namespace pw::models::data {
namespace {

struct Sample {
  std::vector<float> image;
  std::int64_t label = -1;
};

Sample sample(const Dataset& set, std::int64_t index) {
  Sample s;
  s.image.resize(static_cast<std::size_t>(kernels::shape_numel(set.sample_shape())));
  set.fill(index, s.image.data(), s.label);
  return s;
}

BOOST_AUTO_TEST_SUITE(synthetic_images)

BOOST_AUTO_TEST_CASE(same_seed_gives_same_samples) {
  const auto a = make_synthetic_images(1000, {1, 28, 28}, 10, 42);
  const auto b = make_synthetic_images(1000, {1, 28, 28}, 10, 42);
  for (std::int64_t i : {0, 1, 517, 999}) {
    const Sample sa = sample(*a, i);
    const Sample sb = sample(*b, i);
    BOOST_TEST(sa.label == sb.label);
    BOOST_TEST(sa.image == sb.image, boost::test_tools::per_element());
  }
  // Reading out of order changes nothing: a sample depends only on (seed, index).
  const Sample again = sample(*a, 517);
  BOOST_TEST(again.image == sample(*b, 517).image, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(other_seed_or_split_gives_other_samples) {
  const auto base = make_synthetic_images(100, {1, 8, 8}, 10, 1);
  const auto other_seed = make_synthetic_images(100, {1, 8, 8}, 10, 2);
  const auto test_split = make_synthetic_images(100, {1, 8, 8}, 10, 1, Split::Test);
  BOOST_TEST(sample(*base, 3).image != sample(*other_seed, 3).image);
  BOOST_TEST(sample(*base, 3).image != sample(*test_split, 3).image);
  BOOST_TEST(base->name() != test_split->name());
}

BOOST_AUTO_TEST_CASE(labels_cover_every_class_and_stay_in_range) {
  const auto set = make_synthetic_images(2000, {1, 4, 4}, 7, 3);
  std::vector<int> seen(7, 0);
  for (std::int64_t i = 0; i < set->size(); ++i) {
    const auto label = sample(*set, i).label;
    BOOST_REQUIRE(label >= 0 && label < 7);
    ++seen[static_cast<std::size_t>(label)];
  }
  for (int n : seen) BOOST_TEST(n > 200);
}

BOOST_AUTO_TEST_CASE(huge_sets_are_not_materialised) {
  // 10^12 samples of 3x224x224 would be 600 PB; reading any index must still be instant.
  const auto set = make_synthetic_images(1'000'000'000'000, {3, 224, 224}, 1000, 7);
  BOOST_TEST(set->size() == 1'000'000'000'000);
  BOOST_TEST(set->sample_shape() == (kernels::Shape{3, 224, 224}), boost::test_tools::per_element());
  const Sample last = sample(*set, set->size() - 1);
  BOOST_TEST(last.image.size() == 3u * 224u * 224u);
  BOOST_TEST(last.label >= 0);
  BOOST_TEST(last.label < 1000);
}

// A nearest-class-mean classifier fitted on training samples labels held-out test samples well,
// so the labels carry signal a model can learn.
BOOST_AUTO_TEST_CASE(labels_are_learnable) {
  const kernels::Shape shape{1, 28, 28};
  const auto train = make_synthetic_images(2000, shape, 10, 5, Split::Train);
  const auto test_set = make_synthetic_images(500, shape, 10, 5, Split::Test);
  const std::size_t pixels = 28 * 28;
  std::vector<std::vector<double>> means(10, std::vector<double>(pixels, 0.0));
  std::vector<int> counts(10, 0);
  for (std::int64_t i = 0; i < train->size(); ++i) {
    const Sample s = sample(*train, i);
    auto& m = means[static_cast<std::size_t>(s.label)];
    for (std::size_t p = 0; p < pixels; ++p) m[p] += s.image[p];
    ++counts[static_cast<std::size_t>(s.label)];
  }
  for (std::size_t c = 0; c < 10; ++c)
    for (auto& v : means[c]) v /= std::max(counts[c], 1);
  int correct = 0;
  for (std::int64_t i = 0; i < test_set->size(); ++i) {
    const Sample s = sample(*test_set, i);
    std::size_t best = 0;
    double best_distance = 1e300;
    for (std::size_t c = 0; c < 10; ++c) {
      double d = 0.0;
      for (std::size_t p = 0; p < pixels; ++p) d += (s.image[p] - means[c][p]) * (s.image[p] - means[c][p]);
      if (d < best_distance) {
        best_distance = d;
        best = c;
      }
    }
    correct += static_cast<std::int64_t>(best) == s.label ? 1 : 0;
  }
  BOOST_TEST_MESSAGE("nearest-mean accuracy " << correct << " / " << test_set->size());
  BOOST_TEST(correct > 450);
}

BOOST_AUTO_TEST_CASE(rejects_unusable_arguments) {
  BOOST_CHECK_THROW(make_synthetic_images(-1, {1, 28, 28}, 10, 0), InputError);
  BOOST_CHECK_THROW(make_synthetic_images(10, {28, 28}, 10, 0), InputError);
  BOOST_CHECK_THROW(make_synthetic_images(10, {1, 0, 28}, 10, 0), InputError);
  BOOST_CHECK_THROW(make_synthetic_images(10, {1, 28, 28}, 0, 0), InputError);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
}  // namespace pw::models::data
