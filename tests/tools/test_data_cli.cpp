// `pipewright data pack` and `pipewright data inspect` as a user runs them.
#include <algorithm>
#include <filesystem>

#include <boost/test/unit_test.hpp>

#include "tests/models/data/image_folder_files.h"
#include "tests/tools/cli_runner.h"

using pw::test::run_pipewright;

namespace {

int lines(const std::string& text) { return static_cast<int>(std::count(text.begin(), text.end(), '\n')); }

}  // namespace

BOOST_AUTO_TEST_CASE(pack_refuses_a_missing_root_in_one_line) {
  pw::test::ImageFolderFiles files("data_cli_missing");
  const auto r = run_pipewright("data pack " + files.path("nothing") + " " + files.path("out"));
  BOOST_TEST_INFO(r.output);
  BOOST_CHECK_EQUAL(r.status, 2);
  BOOST_CHECK_EQUAL(lines(r.output), 1);
  BOOST_CHECK(r.output.find("pipewright: error: image folder") != std::string::npos);
  BOOST_CHECK(!std::filesystem::exists(files.path("out")));
  const auto size = run_pipewright("data pack " + files.path("nothing") + " " + files.path("out") + " --shard-size lots");
  BOOST_CHECK_EQUAL(size.status, 2);
}

BOOST_AUTO_TEST_CASE(pack_shows_progress_and_inspect_reports_both_forms) {
  pw::test::ImageFolderFiles files("data_cli_pack");
  files.write_default();
  const std::string out = files.path("shards");
  const auto pack = run_pipewright("data pack " + files.root() + " " + out + " --shard-size 8KiB");
  BOOST_TEST_INFO(pack.output);
  BOOST_REQUIRE_EQUAL(pack.status, 0);
  BOOST_CHECK(pack.output.find("pack train") != std::string::npos);
  BOOST_CHECK(pack.output.find("100%  14/14 samples") != std::string::npos);
  BOOST_CHECK(pack.output.find("packed 10 train, 4 val samples of 3 classes into") != std::string::npos);
  BOOST_CHECK(std::filesystem::exists(out + "/manifest.json"));

  const auto shards = run_pipewright("data inspect " + out);
  BOOST_TEST_INFO(shards.output);
  BOOST_REQUIRE_EQUAL(shards.status, 0);
  BOOST_CHECK(shards.output.find("tar shards") != std::string::npos);
  BOOST_CHECK(shards.output.find("classes: 3 (cat, dog, fox)") != std::string::npos);
  BOOST_CHECK(shards.output.find("train: 10 samples in") != std::string::npos);
  BOOST_CHECK(shards.output.find("val: 4 samples") != std::string::npos);
  BOOST_CHECK(shards.output.find("encoded bytes min") != std::string::npos);
  BOOST_CHECK(shards.output.find("verified:") != std::string::npos);

  const auto folder = run_pipewright("data inspect " + files.root());
  BOOST_TEST_INFO(folder.output);
  BOOST_REQUIRE_EQUAL(folder.status, 0);
  BOOST_CHECK(folder.output.find("image folder") != std::string::npos);
  BOOST_CHECK(folder.output.find("train: 10 samples;") != std::string::npos);

  const auto again = run_pipewright("data pack " + files.root() + " " + out);
  BOOST_CHECK_EQUAL(again.status, 2);
  BOOST_CHECK(again.output.find("is not empty") != std::string::npos);

  std::filesystem::resize_file(out + "/train-000000.tar", 1024);
  const auto damaged = run_pipewright("data inspect " + out);
  BOOST_TEST_INFO(damaged.output);
  BOOST_CHECK_EQUAL(damaged.status, 2);
  BOOST_CHECK_EQUAL(lines(damaged.output), 1);
  BOOST_CHECK(damaged.output.find("truncated") != std::string::npos);
}
