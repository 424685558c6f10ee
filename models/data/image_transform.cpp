#include "models/data/image_transform.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace pw::models::data {
namespace {

// Python's round(): halves to even, as torchvision's integer sizes are computed.
int round_half_even(double v) { return static_cast<int>(std::nearbyint(v)); }

std::int64_t uniform_int(Rng& rng, std::int64_t lo, std::int64_t hi) {   // [lo, hi]
  return lo + static_cast<std::int64_t>(rng.uniform() * static_cast<double>(hi - lo + 1));
}

ResizePlan whole_window(Box box, int size) { return {box, {size, size}, {0, 0, size, size}, false}; }

}  // namespace

ResizePlan evaluation_plan(ImageSize image, int size) {
  PW_INPUT_CHECK(image.width > 0 && image.height > 0, "an image of " << image.width << "x" << image.height << " pixels");
  const int resize = size * 256 / 224;
  // torchvision's Resize(int): the shorter side becomes `resize`, the longer int(resize * long / short).
  const bool wide = image.width >= image.height;
  const int shorter = wide ? image.height : image.width, longer = wide ? image.width : image.height;
  const int resized_longer = static_cast<int>(static_cast<std::int64_t>(resize) * longer / shorter);
  ResizePlan plan;
  plan.box = {0, 0, static_cast<double>(image.width), static_cast<double>(image.height)};
  plan.resized = wide ? ImageSize{resized_longer, resize} : ImageSize{resize, resized_longer};
  plan.window = {round_half_even((plan.resized.width - size) / 2.0), round_half_even((plan.resized.height - size) / 2.0),
                 size, size};
  return plan;
}

ResizePlan random_resized_crop_plan(ImageSize image, int size, Rng& rng) {
  // torchvision.transforms.RandomResizedCrop.get_params: ten tries at a box of a random area and
  // aspect that fits, then the whole image clamped to the aspect range, centred.
  constexpr double kMinScale = 0.08, kMaxScale = 1.0;
  const double log_min_ratio = std::log(3.0 / 4.0), log_max_ratio = std::log(4.0 / 3.0);
  const double area = static_cast<double>(image.width) * image.height;
  ResizePlan plan;
  bool found = false;
  for (int attempt = 0; attempt < 10 && !found; ++attempt) {
    const double target_area = area * rng.uniform(kMinScale, kMaxScale);
    const double ratio = std::exp(rng.uniform(log_min_ratio, log_max_ratio));
    const int w = round_half_even(std::sqrt(target_area * ratio));
    const int h = round_half_even(std::sqrt(target_area / ratio));
    if (w > 0 && w <= image.width && h > 0 && h <= image.height) {
      const auto top = uniform_int(rng, 0, image.height - h);
      const auto left = uniform_int(rng, 0, image.width - w);
      plan = whole_window({static_cast<double>(left), static_cast<double>(top), static_cast<double>(w),
                           static_cast<double>(h)}, size);
      found = true;
    }
  }
  if (!found) {
    const double in_ratio = static_cast<double>(image.width) / image.height;
    int w = image.width, h = image.height;
    if (in_ratio < 3.0 / 4.0) h = round_half_even(w / (3.0 / 4.0));
    else if (in_ratio > 4.0 / 3.0) w = round_half_even(h * (4.0 / 3.0));
    plan = whole_window({static_cast<double>((image.width - w) / 2), static_cast<double>((image.height - h) / 2),
                         static_cast<double>(w), static_cast<double>(h)}, size);
  }
  plan.flip = rng.uniform() < 0.5;
  return plan;
}

Rng sample_rng(std::uint64_t seed, std::int64_t epoch, std::int64_t index) {
  const std::uint64_t h = splitmix64(splitmix64(splitmix64(seed ^ 0x696d616765ULL) ^ static_cast<std::uint64_t>(epoch)) ^
                                     static_cast<std::uint64_t>(index));
  return Rng(h);
}

PlannedImage decode_for_plan(const EncodedSample& sample, const ResizePlan& plan) {
  // The decode may shrink the image by up to the factor the resize would shrink the box by.
  const double min_scale = std::max(plan.resized.width / plan.box.width, plan.resized.height / plan.box.height);
  const ImageSize stored = encoded_image_size(sample);
  PlannedImage out{decode_image(sample, min_scale), plan};
  const double sx = static_cast<double>(out.image.width) / stored.width;
  const double sy = static_cast<double>(out.image.height) / stored.height;
  out.plan.box = {plan.box.left * sx, plan.box.top * sy, plan.box.width * sx, plan.box.height * sy};
  return out;
}

void resample_planned(const PlannedImage& planned, const Normalization& normalization, float* out) {
  const ResizePlan& plan = planned.plan;
  resample(planned.image, plan.box, plan.resized, plan.window, plan.flip, normalization, out);
}

void apply_plan(const EncodedSample& sample, const ResizePlan& plan, const Normalization& normalization, float* out) {
  resample_planned(decode_for_plan(sample, plan), normalization, out);
}

}  // namespace pw::models::data
