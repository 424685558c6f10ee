// Hostile data files through `pipewright train` and `pipewright data` (issue 49: no crash, no hang
// on hostile input): FIFOs, links to /dev/zero, sparse 6 GB files, shard indexes whose counts or
// offsets overflow, tar headers that declare more than the file holds, folder-link loops. Each is
// one line `pipewright: error: ...` with status 2. Every run has its own bounds, so a regression
// fails here instead of hanging or exhausting the machine: `timeout 60` (a hang ends with 124) and
// `ulimit -v` of 8 GB (reading a 6 GB file or /dev/zero whole ends in std::bad_alloc, status 3).
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "core/durable_file.h"
#include "models/data/shards/shard_index.h"
#include "models/data/shards/shard_manifest.h"
#include "tests/models/data/image_folder_files.h"
#include "tests/tools/cli_runner.h"

namespace fs = std::filesystem;
namespace shards = pw::models::data::shards;

namespace {

constexpr std::int64_t kSixGB = std::int64_t{6} << 30;

pw::test::CommandResult run_bounded(const std::string& args) {
  return pw::test::run_command("ulimit -v 8000000; exec timeout 60 " + pw::test::pipewright_binary() + " " + args);
}

// Status 2 and one line naming what is wrong: not a hang (124), not an internal error (3).
void check_refused(const pw::test::CommandResult& r, const std::vector<std::string>& parts) {
  BOOST_TEST_INFO(r.output);
  BOOST_CHECK_EQUAL(r.status, 2);
  BOOST_CHECK_EQUAL(std::count(r.output.begin(), r.output.end(), '\n'), 1);
  BOOST_CHECK(r.output.rfind("pipewright: error: ", 0) == 0);
  for (const auto& part : parts) BOOST_CHECK_MESSAGE(r.output.find(part) != std::string::npos, "expected '" << part << "'");
}

void make_fifo(const std::string& path) { BOOST_REQUIRE_EQUAL(::mkfifo(path.c_str(), 0600), 0); }
void link_dev_zero(const std::string& path) { fs::create_symlink("/dev/zero", path); }
// A file of `bytes` bytes that takes no disk: ftruncate leaves a hole.
void make_sparse(const std::string& path, std::int64_t bytes, const std::vector<std::uint8_t>& head = {}) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(head.data()), static_cast<std::streamsize>(head.size()));
  fs::resize_file(path, static_cast<std::uintmax_t>(bytes));
}

const char* const kCifarFiles[] = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                   "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin"};
const std::string kTrainCifar = "train --model resnet18 --width 8 --dataset cifar10 --steps 1 --batch-size 4 --threads 1 --data-dir ";
const std::string kTrainFashion = "train --model seed-cnn --dataset fashion-mnist --steps 1 --batch-size 4 --threads 1 --data-dir ";
const std::string kTrainFolder = "train --model resnet18 --width 8 --dataset image-folder --image-size 32 --steps 1 --batch-size 4 --threads 1 --data-dir ";
const std::string kTrainShards = "train --model resnet18 --width 8 --dataset shards --image-size 32 --steps 1 --batch-size 4 --threads 1 --data-dir ";

std::vector<std::uint8_t> idx_header(std::uint32_t magic, const std::vector<std::uint32_t>& dims) {
  std::vector<std::uint8_t> out;
  auto be = [&](std::uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<std::uint8_t>(v >> s));
  };
  be(magic);
  for (auto d : dims) be(d);
  return out;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write_file(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

// A shard folder packed by the CLI from made-up bytes (10 train, 4 val samples, one shard a split).
struct PackedShards {
  pw::test::ImageFolderFiles files{"hostile_shards"};
  std::string out = files.path("shards");
  std::string index = out + "/index-train.bin";
  std::string manifest = out + "/manifest.json";
  std::string shard = out + "/train-000000.tar";
  PackedShards() {
    files.write_default();
    const auto r = pw::test::run_pipewright("data pack " + files.root() + " " + out);
    BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  }
  // Writes `bytes` as the train index with a correct checksum, and the manifest to match, so that
  // what is refused is the content, not the checksums.
  void replace_index(std::string bytes) {
    const std::uint64_t sum = pw::checksum64(bytes.data(), bytes.size() - 8);
    for (int i = 0; i < 8; ++i) bytes[bytes.size() - 8 + i] = static_cast<char>(sum >> (8 * i));
    write_file(index, bytes);
    auto m = shards::read_shard_manifest(manifest);
    for (auto& split : m.splits)
      if (split.name == "train") split.index_checksum = shards::shard_index_checksum(bytes);
    write_file(manifest, shards::encode_shard_manifest(m));
  }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(hostile_data)

BOOST_AUTO_TEST_CASE(cifar10_fifos_are_refused_without_blocking) {
  pw::test::ScratchDir dir("hostile_cifar_fifo");
  for (const char* name : kCifarFiles) make_fifo(dir.file(name));
  check_refused(run_bounded(kTrainCifar + dir.path.string()), {dir.file("data_batch_1.bin"), "named pipe (FIFO)", "regular file"});
}

BOOST_AUTO_TEST_CASE(cifar10_links_to_dev_zero_are_refused_unread) {
  pw::test::ScratchDir dir("hostile_cifar_zero");
  for (const char* name : kCifarFiles) link_dev_zero(dir.file(name));
  check_refused(run_bounded(kTrainCifar + dir.path.string()), {dir.file("data_batch_1.bin"), "character device"});
}

BOOST_AUTO_TEST_CASE(cifar10_sparse_6gb_files_are_refused_by_size_before_reading) {
  pw::test::ScratchDir dir("hostile_cifar_sparse");
  for (const char* name : kCifarFiles) make_sparse(dir.file(name), kSixGB);
  check_refused(run_bounded(kTrainCifar + dir.path.string()),
                {dir.file("data_batch_1.bin"), "6442450944 bytes", "30730000", "10000 records of 3073 bytes"});
}

BOOST_AUTO_TEST_CASE(idx_fifos_and_dev_zero_are_refused) {
  pw::test::ScratchDir dir("hostile_idx");
  make_fifo(dir.file("train-images-idx3-ubyte"));
  make_fifo(dir.file("train-labels-idx1-ubyte"));
  check_refused(run_bounded(kTrainFashion + dir.path.string()), {"train-images-idx3-ubyte", "named pipe (FIFO)"});
  fs::remove(dir.file("train-images-idx3-ubyte"));
  link_dev_zero(dir.file("train-images-idx3-ubyte.gz"));
  check_refused(run_bounded(kTrainFashion + dir.path.string()), {"train-images-idx3-ubyte.gz", "character device"});
}

BOOST_AUTO_TEST_CASE(idx_sparse_6gb_file_declaring_more_than_it_holds_is_refused_unread) {
  pw::test::ScratchDir dir("hostile_idx_sparse");
  // A valid header claiming 2^32 - 1 images of 28x28 (3.4 TB), then 6 GB of holes.
  make_sparse(dir.file("train-images-idx3-ubyte"), kSixGB, idx_header(0x00000803, {0xFFFFFFFFu, 28, 28}));
  check_refused(run_bounded(kTrainFashion + dir.path.string()), {"train-images-idx3-ubyte", "is truncated", "3367254359280"});
}

BOOST_AUTO_TEST_CASE(shard_index_with_shard_count_0xffffffff_is_refused) {
  PackedShards p;
  std::string bytes = read_file(p.index);
  for (int i = 0; i < 4; ++i) bytes[12 + i] = '\xff';   // magic (8), version (4), then the shard count
  p.replace_index(bytes);
  for (const std::string& command : {"data inspect " + p.out, kTrainShards + p.out})
    check_refused(run_bounded(command), {p.index, "shard count", "4294967295"});
}

BOOST_AUTO_TEST_CASE(shard_index_with_sample_count_beyond_its_bytes_is_refused) {
  PackedShards p;
  std::string bytes = read_file(p.index);
  for (int i = 0; i < 8; ++i) bytes[16 + i] = i < 7 ? '\xff' : '\x0f';   // the sample count
  p.replace_index(bytes);
  check_refused(run_bounded("data inspect " + p.out), {p.index, "sample count"});
}

BOOST_AUTO_TEST_CASE(shard_index_whose_offset_plus_size_overflows_is_refused) {
  PackedShards p;
  shards::ShardIndex index = shards::decode_shard_index(read_file(p.index), p.index);
  index.samples[3].offset = std::int64_t{0x7FFFFFFFFFFFFF00};
  index.samples[3].size = std::int64_t{0x7FFFFFFFFFFFFF00};   // offset + size wraps negative
  p.replace_index(shards::encode_shard_index(index));
  for (const std::string& command : {"data inspect " + p.out, kTrainShards + p.out})
    check_refused(run_bounded(command), {p.index, "sample 3", "offset"});
}

BOOST_AUTO_TEST_CASE(tar_member_declaring_more_than_the_shard_holds_is_refused) {
  PackedShards p;
  std::string tar = read_file(p.shard);
  BOOST_REQUIRE_GT(tar.size(), 512u);
  // The first member's header: size 8 GiB - 1 in octal, and the header checksum to match.
  std::memcpy(&tar[124], "77777777777", 12);
  std::memset(&tar[148], ' ', 8);
  unsigned sum = 0;
  for (int i = 0; i < 512; ++i) sum += static_cast<unsigned char>(tar[i]);
  std::snprintf(&tar[148], 8, "%06o", sum);
  tar[155] = ' ';
  write_file(p.shard, tar);
  auto m = shards::read_shard_manifest(p.manifest);
  for (auto& split : m.splits)
    for (auto& shard : split.shards)
      if (shard.file == "train-000000.tar") shard.checksum = pw::file_checksum(p.shard);
  write_file(p.manifest, shards::encode_shard_manifest(m));
  check_refused(run_bounded("data inspect " + p.out), {p.shard, "declares 8589934591 bytes"});
}

BOOST_AUTO_TEST_CASE(manifest_that_names_a_device_or_negative_sizes_is_refused) {
  PackedShards p;
  const std::string saved = read_file(p.manifest);
  auto m = shards::read_shard_manifest(p.manifest);
  m.splits[0].index_file = "/dev/zero";
  write_file(p.manifest, shards::encode_shard_manifest(m));
  check_refused(run_bounded("data inspect " + p.out), {p.manifest, "/dev/zero", "name of a file in the manifest's folder"});
  write_file(p.manifest, saved);
  m = shards::read_shard_manifest(p.manifest);
  m.splits[0].shards[0].bytes = -1;
  write_file(p.manifest, shards::encode_shard_manifest(m));
  check_refused(run_bounded("data inspect " + p.out), {p.manifest, "bytes is -1"});
  // A manifest as large as a sparse 6 GB file is refused unread.
  make_sparse(p.manifest, kSixGB, {'{'});
  check_refused(run_bounded("data inspect " + p.out), {p.manifest, "6442450944 bytes"});
}

BOOST_AUTO_TEST_CASE(image_folder_link_loop_is_one_line_naming_the_link) {
  pw::test::ImageFolderFiles files("hostile_loop");
  files.write_default();
  const std::string link = files.root() + "/train/cat/sub/up";
  fs::create_directory_symlink("../..", link);   // back to train/: os.walk(followlinks=True) would descend without end
  for (const std::string& command : {"data inspect " + files.root(), kTrainFolder + files.root(), "data pack " + files.root() + " " + files.path("out")})
    check_refused(run_bounded(command), {link, "loop"});
  BOOST_CHECK(!fs::exists(files.path("out")));
}

// Links that reach the same folders along many paths, without a loop: each of 18 levels links twice
// to the next, so a walk would list 2^18 folders. The class stops at its cap, in one line.
BOOST_AUTO_TEST_CASE(image_folder_links_along_exponentially_many_paths_are_capped) {
  pw::test::ImageFolderFiles files("hostile_fanout");
  files.write_default();
  const fs::path cat = files.root() + "/train/cat";
  for (int level = 1; level <= 19; ++level) fs::create_directory(cat / ("d" + std::to_string(level)));
  for (int level = 1; level <= 18; ++level) {
    const std::string next = "../d" + std::to_string(level + 1);
    fs::create_directory_symlink(next, cat / ("d" + std::to_string(level)) / "x");
    fs::create_directory_symlink(next, cat / ("d" + std::to_string(level)) / "y");
  }
  check_refused(run_bounded("data inspect " + files.root()), {"more than 100000 folders"});
}

BOOST_AUTO_TEST_CASE(image_folder_self_link_is_one_line) {
  pw::test::ImageFolderFiles files("hostile_self_link");
  files.write_default();
  const std::string link = files.root() + "/train/self";
  fs::create_symlink("self", link);   // `self -> self`: stat fails with ELOOP
  check_refused(run_bounded("data inspect " + files.root()), {link, "cannot be followed"});
}

BOOST_AUTO_TEST_CASE(image_folder_fifo_and_socket_images_are_refused_without_blocking) {
  pw::test::ImageFolderFiles files("hostile_fifo_image");
  files.write_default();
  const std::string fifo = files.root() + "/train/dog/pipe.jpg";
  make_fifo(fifo);
  for (const std::string& command : {"data inspect " + files.root(), kTrainFolder + files.root(), "data pack " + files.root() + " " + files.path("out")})
    check_refused(run_bounded(command), {fifo, "named pipe (FIFO)"});
  fs::remove(fifo);
  const std::string socket_path = files.root() + "/train/dog/sock.png";
  const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  BOOST_REQUIRE_GE(s, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  BOOST_REQUIRE_LT(socket_path.size(), sizeof addr.sun_path);
  std::strcpy(addr.sun_path, socket_path.c_str());
  BOOST_REQUIRE_EQUAL(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  check_refused(run_bounded("data inspect " + files.root()), {socket_path, "socket"});
  ::close(s);
}

BOOST_AUTO_TEST_SUITE_END()
