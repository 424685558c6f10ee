// Tar shards: packing an image folder, the index and manifest, direct reads, roll-over, brace
// patterns, and the one-line refusals of damaged or foreign files.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>
#include <thread>

#include <boost/test/unit_test.hpp>

#include "tests/support/input_error.h"

#include "core/durable_file.h"
#include "core/error.h"
#include "models/data/shards/brace_pattern.h"
#include "models/data/shards/data_summary.h"
#include "models/data/image_folder_listing.h"
#include "models/data/shards/pack.h"
#include "models/data/shards/shard_index.h"
#include "models/data/shards/shard_source.h"
#include "tests/models/data/image_folder_files.h"

namespace fs = std::filesystem;
using namespace pw::models::data;
using namespace pw::models::data::shards;

namespace {

using pw::test::input_error;

void check_one_line(const std::string& message, const std::string& expected_part) {
  BOOST_TEST_INFO(message);
  BOOST_CHECK(message.find('\n') == std::string::npos);
  BOOST_CHECK(message.find(expected_part) != std::string::npos);
}

std::string run_output(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  BOOST_REQUIRE(pipe != nullptr);
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);   // binary-safe
  BOOST_REQUIRE_EQUAL(pclose(pipe), 0);
  return out;
}

void check_source_matches(const EncodedSource& source, const std::vector<pw::test::ExpectedImage>& expected) {
  BOOST_REQUIRE_EQUAL(source.size(), static_cast<std::int64_t>(expected.size()));
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const EncodedSample s = source.read(static_cast<std::int64_t>(i));
    BOOST_TEST_INFO("sample " << i << " " << expected[i].relative << " read as " << s.name);
    BOOST_CHECK(s.bytes == expected[i].bytes);
    BOOST_CHECK_EQUAL(s.label, expected[i].label);
    BOOST_CHECK_EQUAL(source.label(static_cast<std::int64_t>(i)), expected[i].label);
    BOOST_CHECK(s.name.find(expected[i].relative) != std::string::npos);
  }
}

struct Packed {
  pw::test::ImageFolderFiles files{"tar_shards"};
  std::string out = files.path("shards");
  ShardManifest manifest;
  explicit Packed(std::int64_t shard_bytes = std::int64_t{1} << 20) {
    files.write_default();
    PackOptions options;
    options.shard_bytes = shard_bytes;
    manifest = pack_image_folder(files.root(), out, options);
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(listing_follows_torchvision_image_folder_order) {
  pw::test::ImageFolderFiles files("listing");
  files.write_default();
  const ImageFolderListing listing = list_image_folder(files.root());
  BOOST_CHECK((listing.classes == std::vector<std::string>{"cat", "dog", "fox"}));
  BOOST_REQUIRE_EQUAL(listing.train.size(), files.train().size());
  for (std::size_t i = 0; i < listing.train.size(); ++i) {
    BOOST_CHECK_EQUAL(listing.train[i].relative, files.train()[i].relative);
    BOOST_CHECK_EQUAL(listing.train[i].label, files.train()[i].label);
  }
  BOOST_CHECK_EQUAL(listing.train[2].extension, "jpeg");   // "b.JPEG"
  BOOST_CHECK(listing.has_val);
  BOOST_CHECK_EQUAL(listing.val.size(), files.val().size());
}

BOOST_AUTO_TEST_CASE(pack_writes_manifest_and_index_in_image_folder_order) {
  Packed p;
  BOOST_CHECK((p.manifest.classes == std::vector<std::string>{"cat", "dog", "fox"}));
  BOOST_REQUIRE_EQUAL(p.manifest.splits.size(), 2u);
  const ManifestSplit& train = p.manifest.splits[0];
  BOOST_CHECK_EQUAL(train.name, "train");
  BOOST_CHECK_EQUAL(train.samples, 10);
  BOOST_CHECK((train.class_counts == std::vector<std::int64_t>{4, 3, 3}));
  BOOST_CHECK_EQUAL(p.manifest.splits[1].samples, 4);
  BOOST_CHECK(fs::exists(p.out + "/manifest.json"));
  BOOST_CHECK(fs::exists(p.out + "/train-000000.tar"));
  BOOST_CHECK(fs::exists(p.out + "/val-000000.tar"));

  const ShardManifest reread = read_shard_manifest(p.out + "/manifest.json");
  BOOST_CHECK_EQUAL(encode_shard_manifest(reread), encode_shard_manifest(p.manifest));
  for (const auto& shard : train.shards) BOOST_CHECK_EQUAL(shard.checksum, pw::file_checksum(p.out + "/" + shard.file));

  const ShardIndex index = read_shard_index(p.out + "/index-train.bin");
  BOOST_REQUIRE_EQUAL(index.samples.size(), p.files.train().size());
  for (std::size_t i = 0; i < index.samples.size(); ++i) {
    BOOST_CHECK_EQUAL(index.samples[i].source, p.files.train()[i].relative);
    BOOST_CHECK_EQUAL(index.samples[i].label, p.files.train()[i].label);
    BOOST_CHECK_EQUAL(index.samples[i].size, static_cast<std::int64_t>(p.files.train()[i].bytes.size()));
  }
}

BOOST_AUTO_TEST_CASE(reads_return_the_original_bytes_and_labels) {
  Packed p;
  const auto train = open_shard_source(p.out, Split::Train);
  check_source_matches(*train, p.files.train());
  BOOST_CHECK((train->classes() == std::vector<std::string>{"cat", "dog", "fox"}));
  BOOST_CHECK(train->name().find("(train)") != std::string::npos);
  const auto val = open_shard_source(p.out, Split::Test);
  check_source_matches(*val, p.files.val());
  const ShardCheck check = train->verify();
  BOOST_CHECK_EQUAL(check.samples, 10);
  BOOST_CHECK_EQUAL(check.shards, 1);
}

BOOST_AUTO_TEST_CASE(reads_from_several_threads_at_once_agree) {
  Packed p(4 * 1024);
  const auto source = open_shard_source(p.out, Split::Train);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round)
        for (std::int64_t i = (t + round) % source->size(), n = 0; n < source->size(); ++n, i = (i + 1) % source->size())
          if (source->read(i).bytes != p.files.train()[static_cast<std::size_t>(i)].bytes) ++mismatches[static_cast<std::size_t>(t)];
    });
  for (auto& thread : threads) thread.join();
  BOOST_CHECK((mismatches == std::vector<int>(4, 0)));
}

BOOST_AUTO_TEST_CASE(shards_roll_over_at_the_shard_size) {
  constexpr std::int64_t kShardBytes = 8 * 1024;
  Packed p(kShardBytes);
  const ManifestSplit& train = p.manifest.splits[0];
  BOOST_CHECK_GT(train.shards.size(), 2u);
  std::int64_t samples = 0;
  for (std::size_t i = 0; i < train.shards.size(); ++i) {
    const auto& shard = train.shards[i];
    BOOST_CHECK_EQUAL(shard.file, shard_file_name("train", static_cast<std::int64_t>(i)));
    BOOST_CHECK_EQUAL(static_cast<std::int64_t>(fs::file_size(p.out + "/" + shard.file)), shard.bytes);
    BOOST_CHECK(shard.bytes <= kShardBytes || shard.samples == 1);
    BOOST_CHECK_GT(shard.samples, 0);
    samples += shard.samples;
  }
  BOOST_CHECK_EQUAL(samples, 10);
  const auto source = open_shard_source(p.out, Split::Train);
  check_source_matches(*source, p.files.train());
  BOOST_CHECK_EQUAL(source->verify().shards, static_cast<std::int64_t>(train.shards.size()));
}

BOOST_AUTO_TEST_CASE(gnu_tar_lists_the_members) {
  Packed p(8 * 1024);
  const ShardIndex index = read_shard_index(p.out + "/index-train.bin");
  for (std::size_t s = 0; s < index.shards.size(); ++s) {
    std::string expected;
    for (const auto& sample : index.samples)
      if (sample.shard == s) expected += sample.key + "." + sample.extension + "\n" + sample.key + ".cls\n";
    BOOST_CHECK_EQUAL(run_output("tar -tf '" + p.out + "/" + index.shards[s].file + "'"), expected);
  }
  // GNU tar extracts the same bytes and labels.
  const std::string first = p.out + "/train-000000.tar";
  BOOST_CHECK_EQUAL(run_output("tar -xOf '" + first + "' 000000000.cls"), "0");
  const std::string image = run_output("tar -xOf '" + first + "' 000000000.jpg");
  BOOST_CHECK(std::vector<std::uint8_t>(image.begin(), image.end()) == p.files.train()[0].bytes);
}

BOOST_AUTO_TEST_CASE(truncated_shard_is_refused_in_one_line) {
  Packed p;
  const std::string shard = p.out + "/train-000000.tar";
  fs::resize_file(shard, fs::file_size(shard) - 512);
  check_one_line(input_error([&] { open_shard_source(p.out, Split::Train); }), "truncated");
}

BOOST_AUTO_TEST_CASE(changed_shard_bytes_fail_verify_in_one_line) {
  Packed p;
  const std::string shard = p.out + "/train-000000.tar";
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(600);   // inside the first member's data
    f.put('\x5a');
  }
  const auto source = open_shard_source(p.out, Split::Train);   // sizes still match
  check_one_line(input_error([&] { source->verify(); }), "checksum");
}

BOOST_AUTO_TEST_CASE(edited_or_foreign_index_is_refused_in_one_line) {
  Packed p;
  const std::string index = p.out + "/index-train.bin";
  const std::string saved = p.files.path("index.saved");
  fs::copy_file(index, saved);
  {
    std::fstream f(index, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('\x7f');
  }
  check_one_line(input_error([&] { open_shard_source(p.out, Split::Train); }), "damaged");

  // A well-formed index of another pack (here: of the val split) does not belong to this manifest.
  fs::copy_file(p.out + "/index-val.bin", index, fs::copy_options::overwrite_existing);
  check_one_line(input_error([&] { open_shard_source(p.out, Split::Train); }), "does not belong");

  fs::copy_file(saved, index, fs::copy_options::overwrite_existing);
  std::ofstream(p.out + "/index-val.bin", std::ios::binary) << "not an index at all";
  check_one_line(input_error([&] { open_shard_source(p.out, Split::Test); }), "not a pipewright shard index");
  BOOST_CHECK_EQUAL(open_shard_source(p.out, Split::Train)->size(), 10);
}

BOOST_AUTO_TEST_CASE(missing_or_foreign_manifest_is_refused_in_one_line) {
  pw::test::ImageFolderFiles files("no_manifest");
  files.write_raw("x/manifest.json", {'{', '}'});
  check_one_line(input_error([&] { open_shard_source(files.path("x"), Split::Train); }), "not a pipewright shard manifest");
  fs::create_directories(files.path("y"));
  check_one_line(input_error([&] { open_shard_source(files.path("y"), Split::Train); }), "manifest.json");
}

BOOST_AUTO_TEST_CASE(brace_patterns_expand_ranges_and_lists) {
  BOOST_CHECK((expand_braces("train-{000000..000003}.tar") ==
               std::vector<std::string>{"train-000000.tar", "train-000001.tar", "train-000002.tar", "train-000003.tar"}));
  BOOST_CHECK((expand_braces("{train,val}-{0..1}.tar") ==
               std::vector<std::string>{"train-0.tar", "train-1.tar", "val-0.tar", "val-1.tar"}));
  BOOST_CHECK((expand_braces("s{3..1}") == std::vector<std::string>{"s3", "s2", "s1"}));
  BOOST_CHECK((expand_braces("s{8..10}") == std::vector<std::string>{"s8", "s9", "s10"}));
  BOOST_CHECK((expand_braces("plain.tar") == std::vector<std::string>{"plain.tar"}));
  check_one_line(input_error([] { expand_braces("a{1..2"); }), "unmatched '{'");
  check_one_line(input_error([] { expand_braces("a}"); }), "unmatched '}'");
  check_one_line(input_error([] { expand_braces("a{{1,2}}"); }), "nested");
  check_one_line(input_error([] { expand_braces("a{x..2}"); }), "not two integers");
  check_one_line(input_error([] { expand_braces("a{}"); }), "empty braces");
}

BOOST_AUTO_TEST_CASE(a_brace_pattern_selects_its_shards) {
  Packed p(8 * 1024);
  const ShardIndex index = read_shard_index(p.out + "/index-train.bin");
  BOOST_REQUIRE_GE(index.shards.size(), 3u);
  const auto source = open_shard_source(p.out + "/train-{000001..000002}.tar", Split::Train);
  std::vector<pw::test::ExpectedImage> expected;
  for (std::size_t i = 0; i < index.samples.size(); ++i)
    if (index.samples[i].shard == 1 || index.samples[i].shard == 2) expected.push_back(p.files.train()[i]);
  BOOST_REQUIRE(!expected.empty());
  check_source_matches(*source, expected);
  BOOST_CHECK_EQUAL(source->shards().size(), 2u);
  BOOST_CHECK_EQUAL(source->verify().samples, static_cast<std::int64_t>(expected.size()));

  // One file; a train pattern opened for the val split gives the whole val split.
  BOOST_CHECK_EQUAL(open_shard_source(p.out + "/train-000000.tar", Split::Train)->shards().size(), 1u);
  check_source_matches(*open_shard_source(p.out + "/train-{000001..000002}.tar", Split::Test), p.files.val());
  check_one_line(input_error([&] { open_shard_source(p.out + "/train-{000001..000099}.tar", Split::Train); }), "does not exist");
  std::ofstream(p.out + "/stray.tar") << "x";
  check_one_line(input_error([&] { open_shard_source(p.out + "/stray.tar", Split::Train); }), "is not a shard listed");
}

BOOST_AUTO_TEST_CASE(pack_refuses_bad_input_in_one_line) {
  pw::test::ImageFolderFiles files("pack_bad");
  check_one_line(input_error([&] { pack_image_folder(files.root(), files.path("out")); }), "has no train/ folder");
  BOOST_CHECK(!fs::exists(files.path("out")));

  files.write_default();
  fs::create_directories(files.root() + "/train/empty");
  check_one_line(input_error([&] { pack_image_folder(files.root(), files.path("out")); }), "holds no .jpg, .jpeg or .png");
  fs::remove(files.root() + "/train/empty");

  fs::create_directories(files.root() + "/val/extra");
  files.write_raw("images/val/extra/e.png", {1, 2, 3});
  check_one_line(input_error([&] { pack_image_folder(files.root(), files.path("out")); }), "differ from those");
  fs::remove_all(files.root() + "/val/extra");

  fs::create_symlink(files.path("nowhere.jpg"), files.root() + "/train/dog/broken.jpg");
  check_one_line(input_error([&] { pack_image_folder(files.root(), files.path("out")); }), "broken.jpg");
  fs::remove(files.root() + "/train/dog/broken.jpg");

  files.write_raw("full/keep.txt", {'k'});
  check_one_line(input_error([&] { pack_image_folder(files.root(), files.path("full")); }), "is not empty");
  BOOST_CHECK(fs::exists(files.path("full/keep.txt")));

  PackOptions zero;
  zero.shard_bytes = 0;
  check_one_line(input_error([&] { pack_image_folder(files.root(), files.path("out"), zero); }), "shard size");
  BOOST_CHECK(!fs::exists(files.path("out")));
}

BOOST_AUTO_TEST_CASE(a_failed_pack_leaves_nothing_behind) {
  pw::test::ImageFolderFiles files("pack_undo");
  files.write_default();
  PackOptions options;
  options.shard_bytes = 4 * 1024;
  const auto fail_after_five = [](const PackProgress& p) {
    if (p.samples_done == 5) throw pw::InputError("stopped for the test");
  };
  fs::create_directories(files.path("empty"));
  BOOST_CHECK_THROW(pack_image_folder(files.root(), files.path("empty"), options, fail_after_five), pw::InputError);
  BOOST_CHECK(fs::exists(files.path("empty")) && fs::is_empty(files.path("empty")));
  BOOST_CHECK_THROW(pack_image_folder(files.root(), files.path("new"), options, fail_after_five), pw::InputError);
  BOOST_CHECK(!fs::exists(files.path("new")));
  // And a retry into the same folder works.
  std::int64_t calls = 0;
  pack_image_folder(files.root(), files.path("empty"), options, [&](const PackProgress&) { ++calls; });
  BOOST_CHECK_GT(calls, 14);
  check_source_matches(*open_shard_source(files.path("empty"), Split::Train), files.train());
}

BOOST_AUTO_TEST_CASE(summaries_of_a_folder_and_its_shards_agree) {
  Packed p(8 * 1024);
  const DataSummary folder = summarize_data(p.files.root(), false);
  const DataSummary packed = summarize_data(p.out, true);
  BOOST_CHECK_EQUAL(folder.kind, "image folder");
  BOOST_CHECK_EQUAL(packed.kind, "tar shards");
  BOOST_CHECK(folder.classes == packed.classes);
  BOOST_REQUIRE_EQUAL(folder.splits.size(), 2u);
  BOOST_REQUIRE_EQUAL(packed.splits.size(), 2u);
  for (std::size_t s = 0; s < 2; ++s) {
    BOOST_CHECK_EQUAL(folder.splits[s].samples, packed.splits[s].samples);
    BOOST_CHECK(folder.splits[s].class_counts == packed.splits[s].class_counts);
    BOOST_CHECK_EQUAL(folder.splits[s].encoded_bytes.median, packed.splits[s].encoded_bytes.median);
    BOOST_CHECK_EQUAL(folder.splits[s].encoded_bytes.max, packed.splits[s].encoded_bytes.max);
  }
  BOOST_REQUIRE(packed.verified.has_value());
  BOOST_CHECK_EQUAL(packed.verified->samples, 14);
  const DataSummary one = summarize_data(p.out + "/train-{000000..000001}.tar", true);
  BOOST_REQUIRE_EQUAL(one.splits.size(), 1u);
  BOOST_CHECK_EQUAL(one.splits[0].name, "train");
  BOOST_CHECK_EQUAL(one.splits[0].shards, 2);
}

BOOST_AUTO_TEST_CASE(byte_stats_are_nearest_rank) {
  const ByteStats s = byte_stats({10, 1, 9, 2, 8, 3, 7, 4, 6, 5});
  BOOST_CHECK_EQUAL(s.min, 1);
  BOOST_CHECK_EQUAL(s.median, 5);
  BOOST_CHECK_EQUAL(s.p90, 9);
  BOOST_CHECK_EQUAL(s.max, 10);
  BOOST_CHECK_EQUAL(byte_stats({}).max, 0);
}
