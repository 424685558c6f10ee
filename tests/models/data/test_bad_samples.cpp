// Images that do not decode: by default a one-line error naming the file; with BadSamples::Skip
// the next sample that decodes takes the bad one's place, image and label, on every kind of rank.
#include <filesystem>
#include <fstream>

#include <boost/test/unit_test.hpp>

#include "models/data/bad_sample_log.h"
#include "models/data/image_dataset.h"
#include "tests/models/data/idx_test_files.h"
#include "tests/models/data/image_test_files.h"

namespace pw::models::data {
namespace {

using test::MessageMentions;

using test::write_file;

// train/a: 0.jpg (good), 1.jpg (truncated); train/b: 2.png (empty), 3.png (good), 4.jpg (truncated,
// the last: its replacement wraps round to sample 0).
struct BadFolder {
  test::TempDir root;
  BadFolder() {
    const auto jpeg = test::encode_jpeg(test::smooth_pixels(40, 32, 3, 1), 40, 32, TJPF_RGB);
    const test::Bytes truncated(jpeg.begin(), jpeg.begin() + static_cast<std::ptrdiff_t>(jpeg.size() * 2 / 3));
    write_file(root.file("train/a/0.jpg"), jpeg);
    write_file(root.file("train/a/1.jpg"), truncated);
    write_file(root.file("train/b/2.png"), {});
    const auto pixels = test::smooth_pixels(24, 36, 3, 2);
    write_file(root.file("train/b/3.png"), test::encode_png(pixels.data(), 24, 36, PNG_FORMAT_RGB));
    write_file(root.file("train/b/4.jpg"), truncated);
  }
  std::unique_ptr<Dataset> open(ImageOptions options) const {
    return make_image_dataset(open_image_folder(root.str(), Split::Train), std::move(options), Split::Train);
  }
};

constexpr int kSize = 8;
using Image = std::vector<float>;

BOOST_AUTO_TEST_SUITE(bad_samples)

BOOST_AUTO_TEST_CASE(by_default_a_corrupt_or_empty_image_is_a_one_line_error_naming_it) {
  const BadFolder folder;
  ImageOptions options;
  options.size = kSize;
  const auto set = folder.open(options);
  Image image(3 * kSize * kSize);
  std::int64_t label = -1;
  set->fill(0, image.data(), label);
  BOOST_CHECK_EXCEPTION(set->fill(1, image.data(), label), InputError,
                        MessageMentions{folder.root.file("train/a/1.jpg") + ": cannot decode JPEG (Premature end of JPEG file)"});
  BOOST_CHECK_EXCEPTION(set->fill_image_in_epoch(3, 2, image.data()), InputError,
                        MessageMentions{folder.root.file("train/b/2.png") + ": empty file; expected a JPEG or PNG image"});
  // Labels still come from the folder names, without decoding.
  BOOST_TEST(set->fill_label(1) == 0);
  BOOST_TEST(set->fill_label_in_epoch(3, 2) == 1);
}

BOOST_AUTO_TEST_CASE(with_skip_the_next_good_sample_takes_a_bad_ones_place_image_and_label) {
  const BadFolder folder;
  ImageOptions options;
  options.size = kSize;
  options.augment = Augment::None;   // every sample's transform is the same: a replacement equals its original
  options.bad_samples = BadSamples::Skip;
  options.bad_sample_log = std::make_shared<BadSampleLog>();
  const auto set = folder.open(options);
  // sample -> the one in its place: 1 -> 3 (2 is bad too), 2 -> 3, 4 -> 0 (wrapping).
  const std::pair<std::int64_t, std::int64_t> replaced[] = {{0, 0}, {1, 3}, {2, 3}, {3, 3}, {4, 0}};
  for (const auto& [index, by] : replaced) {
    Image got(3 * kSize * kSize), want(got.size());
    std::int64_t got_label = -1, want_label = -2;
    set->fill(index, got.data(), got_label);
    set->fill(by, want.data(), want_label);
    BOOST_TEST_CONTEXT("sample " << index) {
      BOOST_TEST(got == want);
      BOOST_TEST(got_label == want_label);
      BOOST_TEST(set->fill_label(index) == want_label);
      BOOST_TEST(set->fill_label_in_epoch(2, index) == want_label);
    }
  }
  BOOST_TEST(set->fill_label(1) == 1);   // sample 1's own folder is a: the label is the replacement's
  BOOST_TEST(set->fill_label(4) == 0);
  const auto& log = *options.bad_sample_log;
  BOOST_TEST(log.count() == 3);
  BOOST_TEST(log.first(2) == (std::vector<std::string>{folder.root.file("train/a/1.jpg"), folder.root.file("train/b/2.png")}),
             boost::test_tools::per_element());

  // Filling labels alone records nothing (a pipeline's last stage): the first stage counts.
  options.bad_sample_log = std::make_shared<BadSampleLog>();
  const auto labels_only = folder.open(options);
  for (std::int64_t i = 0; i < 5; ++i) labels_only->fill_label_in_epoch(0, i);
  BOOST_TEST(options.bad_sample_log->count() == 0);
}

BOOST_AUTO_TEST_CASE(with_skip_a_replacement_is_transformed_as_the_sample_it_replaces_in_every_epoch) {
  const BadFolder folder;
  ImageOptions options;
  options.size = kSize;
  options.seed = 7;
  options.bad_samples = BadSamples::Skip;
  const auto set = folder.open(options);
  for (std::int64_t epoch = 0; epoch < 3; ++epoch) {
    Image both(3 * kSize * kSize), alone(both.size()), other(both.size());
    std::int64_t label = -1;
    set->fill_in_epoch(epoch, 2, both.data(), label);
    set->fill_image_in_epoch(epoch, 2, alone.data());
    BOOST_TEST(both == alone);
    BOOST_TEST(label == set->fill_label_in_epoch(epoch, 2));
    // Sample 3 itself: the same file, but its own random crop.
    set->fill_image_in_epoch(epoch, 3, other.data());
    BOOST_TEST(both != other);
  }
}

BOOST_AUTO_TEST_CASE(with_skip_a_folder_of_which_nothing_decodes_is_an_error) {
  test::TempDir root;
  write_file(root.file("train/a/0.png"), {});
  write_file(root.file("train/a/1.jpg"), {0xFF, 0xD8, 0xFF, 0xE0});
  ImageOptions options;
  options.size = kSize;
  options.bad_samples = BadSamples::Skip;
  const auto set = make_image_dataset(open_image_folder(root.str(), Split::Train), options, Split::Train);
  Image image(3 * kSize * kSize);
  BOOST_CHECK_EXCEPTION(set->fill_image(1, image.data()), InputError,
                        MessageMentions{"none of its 2 images decodes (" + root.file("train/a/1.jpg") + ": "});
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
}  // namespace pw::models::data
