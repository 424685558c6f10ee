// The per-channel normalisation of image data sets: its text form and its effect on the samples.
#include <cmath>
#include <filesystem>
#include <fstream>

#include <boost/test/unit_test.hpp>

#include "models/data/image_dataset.h"
#include "models/data/normalization.h"
#include "tests/models/data/idx_test_files.h"
#include "tests/models/data/image_test_files.h"

namespace pw::models::data {
namespace {

using test::MessageMentions;

using test::write_file;

BOOST_AUTO_TEST_SUITE(normalization)

BOOST_AUTO_TEST_CASE(the_text_form_reads_one_or_three_values_a_side_and_writes_them_back) {
  const auto imagenet = parse_normalization("0.485,0.456,0.406:0.229,0.224,0.225");
  BOOST_TEST((imagenet == kImageNetNormalization));
  BOOST_TEST(normalization_text(imagenet) == "0.485,0.456,0.406:0.229,0.224,0.225");
  const auto grey = parse_normalization("0.5:0.25");
  BOOST_TEST((grey == Normalization{{0.5f, 0.5f, 0.5f}, {0.25f, 0.25f, 0.25f}}));
  BOOST_TEST(normalization_text(grey) == "0.5:0.25");
  BOOST_TEST((parse_normalization(normalization_text(kCifar10Normalization)) == kCifar10Normalization));
}

BOOST_AUTO_TEST_CASE(bad_text_is_a_one_line_error_saying_what_is_accepted) {
  const std::string accepted = "expected MEAN,...:STD,... with one value a side (every channel) or three (R, G, B)";
  BOOST_CHECK_EXCEPTION(parse_normalization("0.5,0.5:0.2,0.2"), InputError, MessageMentions{"2 values a side; " + accepted});
  BOOST_CHECK_EXCEPTION(parse_normalization("0.5"), InputError, MessageMentions{"needs one ':'"});
  BOOST_CHECK_EXCEPTION(parse_normalization("0.5:0.2:0.1"), InputError, MessageMentions{"needs one ':'"});
  BOOST_CHECK_EXCEPTION(parse_normalization("half:0.2"), InputError, MessageMentions{"a value is not a number"});
  BOOST_CHECK_EXCEPTION(parse_normalization("0.5,,0.5:0.2"), InputError, MessageMentions{"a value is not a number"});
  BOOST_CHECK_EXCEPTION(parse_normalization("0.5:0.2,0,0.2"), InputError, MessageMentions{"std 0 of channel 1"});
  BOOST_CHECK_EXCEPTION(parse_normalization("0.5:-1"), InputError, MessageMentions{"std -1 of channel 0"});
  BOOST_CHECK_EXCEPTION(parse_normalization("nan:1"), InputError, MessageMentions{"mean nan of channel 0"});
}

BOOST_AUTO_TEST_CASE(it_changes_the_samples_of_image_folders_and_cifar10_as_pixel_over_255_minus_mean_over_std) {
  test::TempDir root;
  const auto pixels = test::smooth_pixels(16, 16, 3, 4);
  write_file(root.file("train/x/1.png"), test::encode_png(pixels.data(), 16, 16, PNG_FORMAT_RGB));
  test::Bytes record{3};
  for (int i = 0; i < 3072; ++i) record.push_back(static_cast<std::uint8_t>(i * 7));
  write_file(root.file("test_batch.bin"), record);
  const Normalization chosen{{0.5f, 0.25f, 0.0f}, {0.25f, 0.5f, 2.0f}};
  for (const char* name : {"image-folder", "cifar10"}) {
    DatasetOptions options;
    options.data_dir = root.str();
    options.image_size = 16;
    options.augment = Augment::None;
    const Split split = std::string(name) == "cifar10" ? Split::Test : Split::Train;
    options.normalization = kNoNormalization;
    const auto plain_set = open_dataset(name, split, options);
    options.normalization = chosen;
    const auto chosen_set = open_dataset(name, split, options);
    options.normalization.reset();
    const auto default_set = open_dataset(name, split, options);
    const auto defaults = std::string(name) == "cifar10" ? kCifar10Normalization : kImageNetNormalization;
    const auto n = static_cast<std::size_t>(3 * plain_set->sample_shape()[1] * plain_set->sample_shape()[2]);
    std::vector<float> plain(n), normalised(n), by_default(n);
    plain_set->fill_image(0, plain.data());
    chosen_set->fill_image(0, normalised.data());
    default_set->fill_image(0, by_default.data());
    BOOST_TEST_CONTEXT(name) {
      float worst = 0, worst_default = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t c = i / (n / 3);
        worst = std::max(worst, std::abs(normalised[i] - (plain[i] - chosen.mean[c]) / chosen.std[c]));
        worst_default = std::max(worst_default, std::abs(by_default[i] - (plain[i] - defaults.mean[c]) / defaults.std[c]));
      }
      BOOST_TEST(worst < 1e-5f);
      BOOST_TEST(worst_default < 1e-5f);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
}  // namespace pw::models::data
