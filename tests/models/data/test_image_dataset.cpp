#include <filesystem>
#include <fstream>

#include <boost/test/unit_test.hpp>

#include "models/data/image_dataset.h"
#include "tests/models/data/idx_test_files.h"
#include "tests/models/data/image_test_files.h"

namespace pw::models::data {
namespace {

using test::MessageMentions;

using test::write_file;

test::Bytes png(int w, int h, int seed) {
  const auto pixels = test::smooth_pixels(w, h, 3, seed);
  return test::encode_png(pixels.data(), w, h, PNG_FORMAT_RGB);
}

BOOST_AUTO_TEST_SUITE(image_datasets)

BOOST_AUTO_TEST_CASE(an_image_folder_reads_classes_and_files_in_imagefolders_order) {
  test::TempDir root;
  write_file(root.file("train/dog/b.PNG"), png(20, 10, 1));
  write_file(root.file("train/dog/a.jpg"), test::encode_jpeg(test::smooth_pixels(12, 12, 3), 12, 12, TJPF_RGB));
  write_file(root.file("train/cat/z.jpeg"), test::encode_jpeg(test::smooth_pixels(12, 12, 3), 12, 12, TJPF_RGB));
  write_file(root.file("train/cat/sub/c.png"), png(8, 8, 2));
  write_file(root.file("train/cat/notes.txt"), {'x'});
  const auto source = open_image_folder(root.str(), Split::Train);
  BOOST_TEST(source->classes() == (std::vector<std::string>{"cat", "dog"}), boost::test_tools::per_element());
  BOOST_REQUIRE_EQUAL(source->size(), 4);
  const char* expected[] = {"train/cat/z.jpeg", "train/cat/sub/c.png", "train/dog/a.jpg", "train/dog/b.PNG"};
  for (int i = 0; i < 4; ++i) {
    const auto sample = source->read(i);
    BOOST_TEST(sample.name == root.file(expected[i]));
    BOOST_TEST(sample.label == (i < 2 ? 0 : 1));
    BOOST_TEST(source->label(i) == sample.label);
  }
  BOOST_CHECK_EXCEPTION(open_image_folder(root.str(), Split::Test), InputError, MessageMentions{"has no val/ folder"});
  std::filesystem::create_directories(root.file("train/empty"));
  BOOST_CHECK_EXCEPTION(open_image_folder(root.str(), Split::Train), InputError,
                        MessageMentions{"class folder '" + root.file("train/empty") + "' holds no .jpg, .jpeg or .png file"});
}

BOOST_AUTO_TEST_CASE(an_image_data_set_transforms_by_split_and_epoch_and_reads_labels_without_decoding) {
  test::TempDir root;
  write_file(root.file("train/a/1.png"), png(40, 30, 3));
  write_file(root.file("train/b/2.png"), png(30, 40, 4));
  write_file(root.file("train/b/broken.png"), {0x89, 'P', 'N', 'G'});
  ImageOptions options;
  options.size = 16;
  options.seed = 5;
  const auto train = make_image_dataset(open_image_folder(root.str(), Split::Train), options, Split::Train);
  BOOST_TEST(train->sample_shape() == (kernels::Shape{3, 16, 16}), boost::test_tools::per_element());
  BOOST_TEST(train->num_classes() == 2);
  std::vector<float> a(3 * 16 * 16), b(a.size()), c(a.size());
  std::int64_t label = -1;
  train->fill_in_epoch(1, 0, a.data(), label);
  BOOST_TEST(label == 0);
  train->fill_image_in_epoch(1, 0, b.data());
  BOOST_TEST(a == b);
  train->fill_image_in_epoch(2, 0, c.data());
  BOOST_TEST(a != c);
  BOOST_TEST(train->fill_label(2) == 1);   // the broken file is never decoded for its label
  BOOST_CHECK_EXCEPTION(train->fill_image(2, a.data()), InputError, MessageMentions{"broken.png: "});

  options.augment = Augment::None;   // evaluation transform: the same every epoch
  const auto plain = make_image_dataset(open_image_folder(root.str(), Split::Train), options, Split::Train);
  plain->fill_image_in_epoch(1, 1, a.data());
  plain->fill_image_in_epoch(2, 1, b.data());
  BOOST_TEST(a == b);
}

BOOST_AUTO_TEST_CASE(cifar10_reads_records_and_refuses_a_wrong_size) {
  test::TempDir dir;
  test::Bytes records;
  for (int r = 0; r < 3; ++r) {
    records.push_back(static_cast<std::uint8_t>(r * 4));
    for (int i = 0; i < 3072; ++i) records.push_back(static_cast<std::uint8_t>((i / 1024) * 100 + r));
  }
  write_file(dir.file("test_batch.bin"), records);
  const auto set = open_cifar10(dir.str(), Split::Test, DataParts::Both, kNoNormalization);
  BOOST_REQUIRE_EQUAL(set->size(), 3);
  BOOST_TEST(set->sample_shape() == (kernels::Shape{3, 32, 32}), boost::test_tools::per_element());
  std::vector<float> image(3072);
  std::int64_t label = -1;
  set->fill(2, image.data(), label);
  BOOST_TEST(label == 8);
  BOOST_TEST(image[0] == 2 / 255.0f);
  BOOST_TEST(image[1024] == 102 / 255.0f);
  BOOST_TEST(image[3071] == 202 / 255.0f);
  BOOST_CHECK_EXCEPTION(open_cifar10(dir.str(), Split::Train), InputError, MessageMentions{"data_batch_1.bin"});
  records.pop_back();
  write_file(dir.file("test_batch.bin"), records);
  BOOST_CHECK_EXCEPTION(open_cifar10(dir.str(), Split::Test), InputError, MessageMentions{"holds 9218 bytes"});
}

BOOST_AUTO_TEST_CASE(open_dataset_opens_image_folders_and_cifar10_from_the_data_dir) {
  test::TempDir root;
  write_file(root.file("train/x/1.png"), png(10, 10, 1));
  write_file(root.file("val/x/1.png"), png(10, 10, 1));
  DatasetOptions options;
  BOOST_CHECK_EXCEPTION(open_dataset("image-folder", Split::Test, options), InputError, MessageMentions{"--data-dir"});
  options.data_dir = root.str();
  options.image_size = 8;
  const auto set = open_dataset("image-folder", Split::Test, options);
  BOOST_TEST(set->size() == 1);
  BOOST_TEST(set->sample_shape() == (kernels::Shape{3, 8, 8}), boost::test_tools::per_element());
  BOOST_CHECK_EXCEPTION(parse_enum<Augment>("autoaugment"), InputError, MessageMentions{"imagenet, none"});
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
}  // namespace pw::models::data
