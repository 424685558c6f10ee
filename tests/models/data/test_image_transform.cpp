// The resize against torchvision (tests/golden/resize_golden.safetensors, made by
// tests/golden/make_resize_golden.py), the ImageNet recipe's crop plans, and DCT-scaled decoding
// through the whole transform.
#include <algorithm>
#include <cmath>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kernels/safetensors.h"
#include "models/data/image_transform.h"
#include "tests/models/data/image_test_files.h"
#include "tests/support/test_util.h"

namespace pw::models::data {
namespace {

const kernels::NamedTensors& golden() {
  static const kernels::NamedTensors tensors =
      kernels::load_safetensors(test::source_dir() + "/tests/golden/resize_golden.safetensors");
  return tensors;
}

RgbImage golden_image() {
  const auto& t = golden().at("image");
  RgbImage image{static_cast<int>(t.shape()[1]), static_cast<int>(t.shape()[0]), {}};
  const float* p = t.data<float>();
  for (std::int64_t i = 0; i < t.numel(); ++i) image.pixels.push_back(static_cast<std::uint8_t>(p[i]));
  return image;
}

double max_difference(const std::vector<float>& mine, const kernels::Tensor& theirs) {
  BOOST_REQUIRE_EQUAL(static_cast<std::int64_t>(mine.size()), theirs.numel());
  double worst = 0;
  for (std::size_t i = 0; i < mine.size(); ++i) worst = std::max(worst, std::abs(double{mine[i]} - theirs.data<float>()[i]));
  return worst;
}

std::vector<float> run(const RgbImage& image, const ResizePlan& plan) {
  std::vector<float> out(3 * static_cast<std::size_t>(plan.window.width) * plan.window.height);
  resample(image, plan.box, plan.resized, plan.window, plan.flip, kNoNormalization, out.data());
  return out;
}

BOOST_AUTO_TEST_SUITE(image_transform)

BOOST_AUTO_TEST_CASE(evaluation_resize_and_centre_crop_equal_torchvision) {
  const RgbImage image = golden_image();
  for (int size : {32, 24}) {
    const ResizePlan plan = evaluation_plan({image.width, image.height}, size);
    BOOST_TEST(plan.resized.height == size * 256 / 224);
    BOOST_TEST(max_difference(run(image, plan), golden().at("eval_s" + std::to_string(size))) < 2e-3);

    // The same through a PNG file and apply_plan (PNG is lossless and never decoded reduced).
    const auto png = test::sample_of(test::encode_png(image.pixels.data(), image.width, image.height, PNG_FORMAT_RGB));
    std::vector<float> out(3 * static_cast<std::size_t>(size) * size);
    apply_plan(png, plan, kNoNormalization, out.data());
    BOOST_TEST(max_difference(out, golden().at("eval_s" + std::to_string(size))) < 2e-3);
  }
}

BOOST_AUTO_TEST_CASE(a_crop_resized_down_or_up_equals_torchvisions_resized_crop) {
  const RgbImage image = golden_image();
  const ResizePlan down{{9, 5, 40, 30}, {16, 16}, {0, 0, 16, 16}, false};
  BOOST_TEST(max_difference(run(image, down), golden().at("crop_down")) < 2e-3);
  const ResizePlan up{{3, 2, 12, 10}, {32, 32}, {0, 0, 32, 32}, false};
  BOOST_TEST(max_difference(run(image, up), golden().at("crop_up")) < 2e-3);
}

BOOST_AUTO_TEST_CASE(flip_mirrors_and_normalisation_is_per_channel) {
  const RgbImage image = golden_image();
  ResizePlan plan{{9, 5, 40, 30}, {16, 16}, {0, 0, 16, 16}, false};
  const auto plain = run(image, plan);
  plan.flip = true;
  const auto flipped = run(image, plan);
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 16; ++y)
      for (int x = 0; x < 16; ++x) BOOST_TEST(flipped[(c * 16 + y) * 16 + x] == plain[(c * 16 + y) * 16 + 15 - x]);
  std::vector<float> normalised(plain.size());
  resample(image, plan.box, plan.resized, plan.window, false, kImageNetNormalization, normalised.data());
  for (std::size_t i = 0; i < plain.size(); ++i) {
    const auto c = i / 256;
    BOOST_TEST(std::abs(normalised[i] - (plain[i] - kImageNetNormalization.mean[c]) / kImageNetNormalization.std[c]) < 1e-5);
  }
}

BOOST_AUTO_TEST_CASE(random_resized_crops_follow_torchvisions_ranges_and_are_pure_in_seed_epoch_and_index) {
  const ImageSize image{500, 375};
  int flips = 0, draws = 0;
  for (std::int64_t index = 0; index < 400; ++index) {
    Rng rng = sample_rng(7, 3, index);
    const ResizePlan plan = random_resized_crop_plan(image, 224, rng);
    const Box& b = plan.box;
    BOOST_TEST(b.left >= 0);
    BOOST_TEST(b.top >= 0);
    BOOST_TEST(b.left + b.width <= image.width);
    BOOST_TEST(b.top + b.height <= image.height);
    const double area = b.width * b.height / (500.0 * 375.0), ratio = b.width / b.height;
    BOOST_TEST(area > 0.075);
    BOOST_TEST(area <= 1.0);
    BOOST_TEST(ratio > 0.74);
    BOOST_TEST(ratio < 1.35);
    BOOST_TEST(plan.resized.width == 224);
    flips += plan.flip ? 1 : 0;
    ++draws;
    Rng again = sample_rng(7, 3, index);
    const ResizePlan same = random_resized_crop_plan(image, 224, again);
    BOOST_TEST((same.box.left == b.left && same.box.top == b.top && same.box.width == b.width && same.flip == plan.flip));
  }
  BOOST_TEST(std::abs(flips - draws / 2) < draws / 8);
  Rng a = sample_rng(7, 3, 5), b = sample_rng(7, 4, 5), c = sample_rng(8, 3, 5);
  const double first = a.uniform();
  BOOST_TEST(first != b.uniform());
  BOOST_TEST(first != c.uniform());
}

BOOST_AUTO_TEST_CASE(random_resized_crop_falls_back_to_a_centred_box_of_the_extreme_aspect) {
  Rng rng = sample_rng(1, 0, 0);
  const ResizePlan plan = random_resized_crop_plan({1000, 10}, 32, rng);   // no box of ratio <= 4/3 fits
  BOOST_TEST(plan.box.height == 10);
  BOOST_TEST(plan.box.width == 13);
  BOOST_TEST(plan.box.left == 493);
  BOOST_TEST(plan.box.top == 0);
}

BOOST_AUTO_TEST_CASE(a_large_jpeg_is_decoded_reduced_and_gives_nearly_the_full_decodes_result) {
  const test::Bytes pixels = test::smooth_pixels(512, 384, 3, 2);
  const auto jpeg = test::sample_of(test::encode_jpeg(pixels, 512, 384, TJPF_RGB));
  const ResizePlan plan = evaluation_plan({512, 384}, 32);   // shorter side 36: a 1/8 decode (64x48) suffices
  std::vector<float> reduced(3 * 32 * 32);
  apply_plan(jpeg, plan, kNoNormalization, reduced.data());
  const auto full = run(decode_image(jpeg), plan);
  double sum = 0;
  for (std::size_t i = 0; i < full.size(); ++i) sum += std::abs(full[i] - reduced[i]);
  BOOST_TEST(sum / full.size() < 0.01);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
}  // namespace pw::models::data
