#include <algorithm>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "models/data/dataset.h"
#include "models/data/idx_reader.h"
#include "tests/models/data/idx_test_files.h"

namespace pw::models::data {
namespace {

using pw::test::Compression;
using pw::test::MessageMentions;
using pw::test::TempDir;

// Writes a Fashion-MNIST-shaped pair of `images` 2x2 images and `labels` labels.
void write_small_set(const TempDir& dir, const std::string& prefix, std::uint32_t images, std::uint32_t labels,
                     std::uint8_t label_value = 3) {
  write_file(dir.file(prefix + "-images-idx3-ubyte.gz"),
             test::idx_bytes(kIdxImagesMagic, {images, 2, 2}, std::vector<std::uint8_t>(images * 4, 255)),
             Compression::Gzip);
  write_file(dir.file(prefix + "-labels-idx1-ubyte"),
             test::idx_bytes(kIdxLabelsMagic, {labels}, std::vector<std::uint8_t>(labels, label_value)),
             Compression::Plain);
}

BOOST_AUTO_TEST_SUITE(fashion_mnist)

BOOST_AUTO_TEST_CASE(reads_the_installed_training_set) {
  const auto train = open_fashion_mnist(kFashionMnistDefaultDir, Split::Train);
  BOOST_TEST(train->size() == 60000);
  BOOST_TEST(train->sample_shape() == (kernels::Shape{1, 28, 28}), boost::test_tools::per_element());
  BOOST_TEST(train->num_classes() == 10);

  std::vector<float> image(28 * 28);
  std::int64_t label = -1;
  train->fill(0, image.data(), label);
  BOOST_TEST(label == 9);   // the first training image is an ankle boot

  std::vector<std::int64_t> per_class(10, 0);
  float lo = 1e9f, hi = -1e9f;
  for (std::int64_t i = 0; i < train->size(); ++i) {
    train->fill(i, image.data(), label);
    BOOST_REQUIRE(label >= 0 && label < 10);
    ++per_class[static_cast<std::size_t>(label)];
    const auto [mn, mx] = std::minmax_element(image.begin(), image.end());
    lo = std::min(lo, *mn);
    hi = std::max(hi, *mx);
  }
  for (auto n : per_class) BOOST_TEST(n == 6000);   // the set is balanced
  BOOST_TEST(lo == (0.0f - kFashionMnistMean) / kFashionMnistStd, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(hi == (1.0f - kFashionMnistMean) / kFashionMnistStd, boost::test_tools::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(normalised_pixels_have_about_zero_mean_and_unit_std) {
  const auto train = open_fashion_mnist(kFashionMnistDefaultDir, Split::Train);
  std::vector<float> image(28 * 28);
  std::int64_t label = 0;
  double sum = 0.0, sum_sq = 0.0;
  const std::int64_t n = 5000;
  for (std::int64_t i = 0; i < n; ++i) {
    train->fill(i, image.data(), label);
    for (float v : image) {
      sum += v;
      sum_sq += double{v} * v;
    }
  }
  const double count = static_cast<double>(n) * 784.0;
  const double mean = sum / count;
  BOOST_TEST(std::abs(mean) < 0.02);
  BOOST_TEST(std::abs(std::sqrt(sum_sq / count - mean * mean) - 1.0) < 0.02);
}

BOOST_AUTO_TEST_CASE(reads_the_installed_test_set) {
  const auto test_set = open_fashion_mnist(kFashionMnistDefaultDir, Split::Test);
  BOOST_TEST(test_set->size() == 10000);
  BOOST_TEST(test_set->sample_shape() == (kernels::Shape{1, 28, 28}), boost::test_tools::per_element());
  std::vector<float> image(28 * 28);
  std::int64_t label = -1;
  test_set->fill(0, image.data(), label);
  BOOST_TEST(label == 9);
}

BOOST_AUTO_TEST_CASE(finds_plain_and_gzip_files_in_a_folder) {
  TempDir dir;
  write_small_set(dir, "train", 5, 5);
  const auto train = open_fashion_mnist(dir.str(), Split::Train);
  BOOST_TEST(train->size() == 5);
  BOOST_TEST(train->sample_shape() == (kernels::Shape{1, 2, 2}), boost::test_tools::per_element());
  std::vector<float> image(4);
  std::int64_t label = 0;
  train->fill(4, image.data(), label);
  BOOST_TEST(label == 3);
  BOOST_TEST(image[0] == (1.0f - kFashionMnistMean) / kFashionMnistStd, boost::test_tools::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(count_mismatch_names_both_files) {
  TempDir dir;
  write_small_set(dir, "t10k", 5, 4);
  const std::string images = dir.file("t10k-images-idx3-ubyte.gz");
  const std::string labels = dir.file("t10k-labels-idx1-ubyte");
  BOOST_CHECK_EXCEPTION(open_fashion_mnist(dir.str(), Split::Test), InputError,
                        MessageMentions{"'" + images + "' holds 5 images but '" + labels + "' holds 4 labels"});
}

BOOST_AUTO_TEST_CASE(label_out_of_range_names_the_file) {
  TempDir dir;
  write_small_set(dir, "train", 2, 2, 10);
  BOOST_CHECK_EXCEPTION(open_fashion_mnist(dir.str(), Split::Train), InputError,
                        MessageMentions{"'" + dir.file("train-labels-idx1-ubyte") + "' has label 10"});
}

BOOST_AUTO_TEST_CASE(missing_folder_names_the_expected_file) {
  TempDir dir;
  BOOST_CHECK_EXCEPTION(open_fashion_mnist(dir.file("absent"), Split::Train), InputError,
                        MessageMentions{dir.file("absent") + "/train-images-idx3-ubyte.gz"});
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
}  // namespace pw::models::data
