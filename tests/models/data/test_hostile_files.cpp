// The data readers against hostile files, in process (issue 49): core/input_file.h's refusals
// (FIFO, device, folder, socket, a file beyond its format's size), IDX headers whose products
// overflow or exceed the file, shard indexes whose counts exceed their bytes, brace patterns
// that multiply, and image-folder links (followed as torchvision follows them; a loop refused).
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "tests/support/input_error.h"

#include "core/durable_file.h"
#include "core/error.h"
#include "core/input_file.h"
#include "models/data/idx_reader.h"
#include "models/data/image_dataset.h"
#include "models/data/image_folder_listing.h"
#include "models/data/shards/brace_pattern.h"
#include "models/data/shards/shard_index.h"
#include "tests/models/data/image_folder_files.h"

namespace fs = std::filesystem;
using namespace pw::models::data;

namespace {

using pw::test::input_error;

void check_one_line(const std::string& message, const std::vector<std::string>& parts) {
  BOOST_TEST_INFO(message);
  BOOST_CHECK(message.find('\n') == std::string::npos);
  for (const auto& part : parts) BOOST_CHECK_MESSAGE(message.find(part) != std::string::npos, "expected '" << part << "'");
}

struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("pw_hostile_files_" + std::to_string(::getpid()));
  Scratch() {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() {
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }
  std::string file(const std::string& name) const { return (dir / name).string(); }
  void write(const std::string& name, const std::vector<std::uint8_t>& bytes) const {
    std::ofstream(file(name), std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
};

std::vector<std::uint8_t> idx_header(std::uint32_t magic, const std::vector<std::uint32_t>& dims) {
  std::vector<std::uint8_t> out;
  auto be = [&](std::uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<std::uint8_t>(v >> s));
  };
  be(magic);
  for (auto d : dims) be(d);
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(hostile_files)

BOOST_AUTO_TEST_CASE(input_file_refuses_what_is_not_a_regular_file_and_names_it) {
  Scratch s;
  BOOST_REQUIRE_EQUAL(::mkfifo(s.file("fifo").c_str(), 0600), 0);
  check_one_line(input_error([&] { pw::InputFile(s.file("fifo"), "test file"); }),
                 {"test file '" + s.file("fifo") + "'", "named pipe (FIFO)", "expected a regular file"});
  fs::create_symlink("/dev/zero", s.file("zero"));
  check_one_line(input_error([&] { pw::read_whole(s.file("zero"), "test file", 1 << 20); }), {s.file("zero"), "character device"});
  check_one_line(input_error([&] { pw::InputFile(s.dir.string(), "test file"); }), {"a folder"});
  check_one_line(input_error([&] { pw::InputFile(s.file("absent"), "test file"); }), {"cannot open test file", "No such file"});
  const int sock = ::socket(AF_UNIX, SOCK_STREAM, 0);
  BOOST_REQUIRE_GE(sock, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, s.file("sock").c_str(), sizeof addr.sun_path - 1);
  BOOST_REQUIRE_EQUAL(::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  check_one_line(input_error([&] { pw::InputFile(s.file("sock"), "test file"); }), {"a socket"});
  ::close(sock);
}

BOOST_AUTO_TEST_CASE(read_whole_refuses_a_file_beyond_the_limit_before_reading_and_reads_exactly_its_size) {
  Scratch s;
  s.write("sparse", {1, 2, 3});
  fs::resize_file(s.file("sparse"), std::uintmax_t{6} << 30);   // 6 GB of holes
  check_one_line(input_error([&] { pw::read_whole(s.file("sparse"), "test file", 1000, "a reason"); }),
                 {s.file("sparse"), "6442450944 bytes, more than the 1000 accepted (a reason)"});
  s.write("small", {7, 8, 9, 10});
  BOOST_CHECK((pw::read_whole_bytes(s.file("small"), "test file", 4) == std::vector<std::uint8_t>{7, 8, 9, 10}));
  BOOST_CHECK_EQUAL(pw::read_whole(s.file("small"), "test file", 4).size(), 4u);
}

BOOST_AUTO_TEST_CASE(cifar10_refuses_fifos_devices_and_oversized_files) {
  Scratch s;
  BOOST_REQUIRE_EQUAL(::mkfifo(s.file("test_batch.bin").c_str(), 0600), 0);
  check_one_line(input_error([&] { open_cifar10(s.dir.string(), Split::Test); }), {"test_batch.bin", "named pipe"});
  fs::remove(s.file("test_batch.bin"));
  s.write("test_batch.bin", {});
  fs::resize_file(s.file("test_batch.bin"), 10001 * 3073);   // one record more than a batch file holds
  check_one_line(input_error([&] { open_cifar10(s.dir.string(), Split::Test); }), {"30733073 bytes", "30730000"});
}

BOOST_AUTO_TEST_CASE(idx_products_that_overflow_or_exceed_the_file_are_refused_unread) {
  Scratch s;
  // rows * cols = (2^32 - 1)^2 overflows int64: checked before it is formed.
  s.write("huge", idx_header(kIdxImagesMagic, {1, 0xFFFFFFFFu, 0xFFFFFFFFu}));
  check_one_line(input_error([&] { read_idx_images(s.file("huge")); }), {"4294967295x4294967295", "more bytes than any file can hold"});
  s.write("big", idx_header(kIdxImagesMagic, {0xFFFFFFFFu, 28, 28}));
  check_one_line(input_error([&] { read_idx_images(s.file("big")); }), {"is truncated: expected 3367254359280 bytes of pixel data, got 0"});
  s.write("labels", idx_header(kIdxLabelsMagic, {0xFFFFFFFFu}));
  check_one_line(input_error([&] { read_idx_labels(s.file("labels")); }), {"expected 4294967295 bytes of label data, got 0"});
  BOOST_REQUIRE_EQUAL(::mkfifo(s.file("fifo").c_str(), 0600), 0);
  check_one_line(input_error([&] { read_idx_labels(s.file("fifo")); }), {"IDX file", "named pipe"});
}

BOOST_AUTO_TEST_CASE(a_gzip_idx_file_declaring_beyond_deflates_ratio_is_refused_unread) {
  Scratch s;
  // A tiny gzip file (a valid stream of the header alone) that claims 2^32 - 1 images.
  const auto header = idx_header(kIdxImagesMagic, {0xFFFFFFFFu, 28, 28});
  gzFile out = gzopen(s.file("bomb.gz").c_str(), "wb");
  BOOST_REQUIRE(out != nullptr);
  BOOST_REQUIRE_EQUAL(gzwrite(out, header.data(), static_cast<unsigned>(header.size())), static_cast<int>(header.size()));
  BOOST_REQUIRE_EQUAL(gzclose(out), Z_OK);
  check_one_line(input_error([&] { read_idx_images(s.file("bomb.gz")); }), {"declares 3367254359280 bytes of pixel data", "gzip-compressed"});
}

BOOST_AUTO_TEST_CASE(shard_index_counts_beyond_its_bytes_are_refused_before_sizing) {
  shards::ShardIndex index;
  index.shards.push_back({"train-000000.tar", 4096});
  index.samples.push_back({0, 512, 100, 1, "000000000", "jpg", "cat/a.jpg"});
  const std::string good = shards::encode_shard_index(index);
  BOOST_CHECK_EQUAL(shards::decode_shard_index(good, "i").samples.size(), 1u);
  auto with = [&](std::size_t at, const std::string& field) {
    std::string bytes = good;
    bytes.replace(at, field.size(), field);
    const std::uint64_t sum = pw::checksum64(bytes.data(), bytes.size() - 8);
    for (int i = 0; i < 8; ++i) bytes[bytes.size() - 8 + i] = static_cast<char>(sum >> (8 * i));
    return bytes;
  };
  check_one_line(input_error([&] { shards::decode_shard_index(with(12, std::string(4, '\xff')), "idx"); }),
                 {"'idx'", "shard count is 4294967295"});
  check_one_line(input_error([&] { shards::decode_shard_index(with(16, std::string(8, '\x7f')), "idx"); }),
                 {"'idx'", "sample count"});
  // Sample 0's shard (right after the shard's 4 + 16 + 8 bytes) names a shard the index lacks.
  check_one_line(input_error([&] { shards::decode_shard_index(with(24 + 4 + 16 + 8, std::string("\x05\0\0\0", 4)), "idx"); }),
                 {"sample 0", "names shard 5"});
  // An offset beyond 2^63 would turn negative.
  check_one_line(input_error([&] { shards::decode_shard_index(with(24 + 28 + 4, std::string(8, '\xff')), "idx"); }),
                 {"sample 0", "offset 18446744073709551615"});
}

BOOST_AUTO_TEST_CASE(brace_patterns_that_multiply_or_overflow_are_refused) {
  check_one_line(input_error([] { shards::expand_braces("s{0..9999}{0..9999}"); }), {"more than 10000000"});
  check_one_line(input_error([] { shards::expand_braces("s{-9223372036854775808..9223372036854775807}"); }), {"too long"});
  BOOST_CHECK_EQUAL(shards::expand_braces("s{0..999}{0..9}").size(), 10000u);
}

BOOST_AUTO_TEST_CASE(image_folder_follows_links_that_do_not_loop_as_torchvision_does) {
  pw::test::ImageFolderFiles files("hostile_links");
  files.write_default();
  // Two links to one folder outside the class: listed under both paths, as os.walk(followlinks=True) lists it.
  files.write_raw("shared/s.jpg", {1, 2, 3});
  fs::create_directory_symlink(files.path("shared"), files.root() + "/train/dog/one");
  fs::create_directory_symlink(files.path("shared"), files.root() + "/train/dog/two");
  fs::create_symlink(files.path("absent"), files.root() + "/train/dog/dangling");   // no image name: ignored
  const ImageFolderListing listing = list_image_folder(files.root());
  std::vector<std::string> dog;
  for (const auto& image : listing.train)
    if (image.label == 1) dog.push_back(image.relative);
  // torchvision's order: by (folder, name), so the linked folders' files follow dog/'s own.
  BOOST_CHECK((dog == std::vector<std::string>{"dog/x.png", "dog/y.jpeg", "dog/z.jpg", "dog/one/s.jpg", "dog/two/s.jpg"}));

  fs::create_directory_symlink(files.root() + "/train", files.root() + "/train/fox/all");   // back to an enclosing folder
  check_one_line(input_error([&] { list_image_folder(files.root()); }), {files.root() + "/train/fox/all", "leads back to", "loop"});
}

BOOST_AUTO_TEST_SUITE_END()
