#pragma once
// torchvision's ImageNet recipe on one encoded image, into 3 x S x S normalised floats:
//   evaluation: Resize(S * 256 / 224) of the shorter side + CenterCrop(S)
//   training:   RandomResizedCrop(S, scale 0.08-1, ratio 3/4-4/3) + RandomHorizontalFlip(0.5)
// Every random choice is a function of (seed, epoch, sample index) alone, so a sample is the same
// whichever thread, replica or resumed run makes it. A JPEG is decoded at the smallest DCT scale
// that still gives the resize at least as many pixels as it outputs.
#include <cstdint>

#include "models/data/encoded_images.h"
#include "models/data/image_resample.h"
#include "models/rng.h"

namespace pw::models::data {

// Where an image's pixels go: `box` of the stored image (in its pixels) is resized to `resized`,
// of which `window` is kept, mirrored when `flip`.
struct ResizePlan {
  Box box;
  ImageSize resized;
  Window window;
  bool flip = false;
};

ResizePlan evaluation_plan(ImageSize image, int size);
ResizePlan random_resized_crop_plan(ImageSize image, int size, Rng& rng);   // with the flip drawn too

// The generator for sample `index` of `epoch`.
Rng sample_rng(std::uint64_t seed, std::int64_t epoch, std::int64_t index);

// An image decoded as a plan needs it, with the plan's box in the decoded image's pixels.
struct PlannedImage {
  RgbImage image;
  ResizePlan plan;
};
// The decode alone (where a sample fails, if it does): at the smallest scale that still gives the
// resize as many pixels as it outputs.
PlannedImage decode_for_plan(const EncodedSample& sample, const ResizePlan& plan);
// Writes 3 x window.height x window.width floats.
void resample_planned(const PlannedImage& planned, const Normalization& normalization, float* out);

// Both: decodes `sample` as `plan` needs it and writes its floats.
void apply_plan(const EncodedSample& sample, const ResizePlan& plan, const Normalization& normalization, float* out);

}  // namespace pw::models::data
