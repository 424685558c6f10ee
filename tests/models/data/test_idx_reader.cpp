#include <boost/test/unit_test.hpp>

#include "models/data/idx_reader.h"
#include "tests/models/data/idx_test_files.h"

namespace pw::models::data {
namespace {

using pw::test::Compression;
using pw::test::MessageMentions;
using pw::test::TempDir;

std::vector<std::uint8_t> ramp(std::size_t n) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(i * 7 % 256);
  return v;
}

void check_round_trip(Compression compression, const std::string& name) {
  TempDir dir;
  const auto pixels = ramp(3 * 2 * 4);
  const std::vector<std::uint8_t> labels{4, 0, 9};
  write_file(dir.file(name + "-images"), test::idx_bytes(kIdxImagesMagic, {3, 2, 4}, pixels), compression);
  write_file(dir.file(name + "-labels"), test::idx_bytes(kIdxLabelsMagic, {3}, labels), compression);

  const IdxImages images = read_idx_images(dir.file(name + "-images"));
  BOOST_TEST(images.count == 3);
  BOOST_TEST(images.rows == 2);
  BOOST_TEST(images.cols == 4);
  BOOST_TEST(images.pixels == pixels, boost::test_tools::per_element());
  BOOST_TEST(read_idx_labels(dir.file(name + "-labels")).labels == labels, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_SUITE(idx_reader)

BOOST_AUTO_TEST_CASE(reads_plain_files) { check_round_trip(Compression::Plain, "plain"); }

BOOST_AUTO_TEST_CASE(reads_gzip_files) { check_round_trip(Compression::Gzip, "gz"); }

BOOST_AUTO_TEST_CASE(reads_an_empty_set) {
  TempDir dir;
  write_file(dir.file("images"), test::idx_bytes(kIdxImagesMagic, {0, 28, 28}, {}), Compression::Plain);
  BOOST_TEST(read_idx_images(dir.file("images")).count == 0);
}

BOOST_AUTO_TEST_CASE(missing_file_names_the_path) {
  TempDir dir;
  const std::string path = dir.file("nowhere-images-idx3-ubyte.gz");
  BOOST_CHECK_EXCEPTION(read_idx_images(path), InputError, MessageMentions{"'" + path + "'"});
  BOOST_CHECK_EXCEPTION(read_idx_labels(path), InputError, MessageMentions{"No such file"});
}

BOOST_AUTO_TEST_CASE(wrong_magic_names_the_path_and_expected_magic) {
  for (const auto compression : {Compression::Plain, Compression::Gzip}) {
    TempDir dir;
    const std::string path = dir.file("swapped");
    // A labels file where images are expected, and the other way round.
    write_file(path, test::idx_bytes(kIdxLabelsMagic, {3}, {1, 2, 3}), compression);
    BOOST_CHECK_EXCEPTION(read_idx_images(path), InputError, MessageMentions{"'" + path + "'"});
    BOOST_CHECK_EXCEPTION(read_idx_images(path), InputError, MessageMentions{"expected 0x00000803"});
    write_file(path, test::idx_bytes(kIdxImagesMagic, {1, 1, 1}, {1}), compression);
    BOOST_CHECK_EXCEPTION(read_idx_labels(path), InputError, MessageMentions{"expected 0x00000801"});
  }
}

BOOST_AUTO_TEST_CASE(truncated_pixels_report_expected_and_actual_bytes) {
  for (const auto compression : {Compression::Plain, Compression::Gzip}) {
    TempDir dir;
    const std::string path = dir.file("short-images");
    write_file(path, test::idx_bytes(kIdxImagesMagic, {10, 28, 28}, ramp(1234)), compression);
    BOOST_CHECK_EXCEPTION(read_idx_images(path), InputError,
                          MessageMentions{"'" + path + "' is truncated: expected 7840 bytes of pixel data, got 1234"});
  }
}

BOOST_AUTO_TEST_CASE(truncated_header_and_labels_are_reported) {
  TempDir dir;
  const std::string header = dir.file("header-only");
  auto bytes = test::idx_bytes(kIdxImagesMagic, {10, 28, 28}, {});
  bytes.resize(9);
  write_file(header, bytes, Compression::Plain);
  BOOST_CHECK_EXCEPTION(read_idx_images(header), InputError, MessageMentions{"'" + header + "' is truncated"});

  const std::string labels = dir.file("short-labels");
  write_file(labels, test::idx_bytes(kIdxLabelsMagic, {5}, {1, 2}), Compression::Gzip);
  BOOST_CHECK_EXCEPTION(read_idx_labels(labels), InputError,
                        MessageMentions{"'" + labels + "' is truncated: expected 5 bytes of label data, got 2"});
}

BOOST_AUTO_TEST_CASE(cut_off_gzip_stream_is_truncation) {
  TempDir dir;
  const std::string whole = dir.file("whole.gz");
  write_file(whole, test::idx_bytes(kIdxImagesMagic, {50, 28, 28}, ramp(50 * 28 * 28)), Compression::Gzip);
  auto compressed = test::read_raw(whole);
  compressed.resize(compressed.size() / 2);
  const std::string cut = dir.file("cut.gz");
  write_file(cut, compressed, Compression::Plain);
  BOOST_CHECK_EXCEPTION(read_idx_images(cut), InputError, MessageMentions{"'" + cut + "' is truncated"});
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
}  // namespace pw::models::data
