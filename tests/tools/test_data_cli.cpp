// `pipewright data pack` and `pipewright data inspect` as a user runs them.
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include <boost/test/unit_test.hpp>

#include "tests/models/data/image_folder_files.h"
#include "tests/models/data/image_test_files.h"
#include "tests/tools/cli_runner.h"

using pw::test::run_pipewright;

namespace {

int lines(const std::string& text) { return static_cast<int>(std::count(text.begin(), text.end(), '\n')); }

// The line of `text` that starts with `prefix`, or empty.
std::string line_starting(const std::string& text, const std::string& prefix) {
  for (std::size_t at = 0; at < text.size();) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    if (text.compare(at, prefix.size(), prefix) == 0) return text.substr(at, end - at);
    at = end + 1;
  }
  return {};
}

// A real JPEG or PNG of width x height under images/SPLIT/CLASS/NAME.
void write_image(const pw::test::ImageFolderFiles& files, const std::string& relative, int width, int height) {
  const auto pixels = pw::test::smooth_pixels(width, height, 3);
  files.write_raw("images/" + relative, relative.ends_with(".png")
                                            ? pw::test::encode_png(pixels.data(), width, height, PNG_FORMAT_RGB)
                                            : pw::test::encode_jpeg(pixels, width, height, TJPF_RGB));
}

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
  // The made-up bytes are no images: counted and named, not fatal.
  BOOST_CHECK(folder.output.find("train unreadable images: 10 of all 10 (first: ") != std::string::npos);
  BOOST_CHECK(folder.output.find("train image sizes") == std::string::npos);
  BOOST_CHECK(folder.output.find("decode: none of all 10 train images decodes") != std::string::npos);

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

BOOST_AUTO_TEST_CASE(inspect_reports_image_sizes_from_headers_and_decode_speed_for_both_forms) {
  pw::test::ImageFolderFiles files("data_cli_sizes");
  write_image(files, "train/cat/a.jpg", 64, 48);
  write_image(files, "train/cat/b.png", 48, 64);
  write_image(files, "train/dog/c.jpg", 80, 60);
  files.write_raw("images/train/dog/d.jpg", {0xFF, 0xD8, 0xFF, 0x00, 0x01});
  write_image(files, "val/cat/e.jpg", 32, 32);
  write_image(files, "val/dog/f.png", 40, 30);
  const std::string out = files.path("shards");
  const auto pack = run_pipewright("data pack " + files.root() + " " + out);
  BOOST_TEST_INFO(pack.output);
  BOOST_REQUIRE_EQUAL(pack.status, 0);

  for (const std::string& path : {files.root(), out}) {
    const auto r = run_pipewright("data inspect " + path);
    BOOST_TEST_INFO(r.output);
    BOOST_REQUIRE_EQUAL(r.status, 0);
    BOOST_CHECK_EQUAL(line_starting(r.output, "train image sizes"),
                      "train image sizes (headers of all 4): width min 48, p5 48, p50 64, p95 80, max 80; "
                      "height min 48, p5 48, p50 60, p95 64, max 64");
    BOOST_CHECK_EQUAL(line_starting(r.output, "val image sizes"),
                      "val image sizes (headers of all 2): width min 32, p5 32, p50 32, p95 40, max 40; "
                      "height min 30, p5 30, p50 30, p95 32, max 32");
    const std::string bad = line_starting(r.output, "train unreadable images: 1 of all 4 (first: ");
    BOOST_CHECK(bad.find("d.jpg") != std::string::npos);
    BOOST_CHECK(line_starting(r.output, "val unreadable").empty());
    // Speed is measured, never asserted: only that it is a figure of the right form.
    const std::string decode = line_starting(r.output, "decode: ");
    double images_per_second = -1, megapixels_per_second = -1;
    BOOST_REQUIRE_EQUAL(std::sscanf(decode.c_str(), "decode: %lf images/s, %lf Mpixel/s", &images_per_second,
                                    &megapixels_per_second), 2);
    BOOST_CHECK_GT(images_per_second, 0.0);
    BOOST_CHECK_GT(megapixels_per_second, 0.0);
    BOOST_CHECK(decode.ends_with("on one thread (all 4 train images, decoded in full; the unreadable skipped)"));
  }
}
