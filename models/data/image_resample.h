#pragma once
// Resizing as torchvision's resize(antialias=True) on tensors (and PIL's Image.resize with
// BILINEAR): a separable triangle filter whose support widens by the downscale factor, so a
// shrunk image is averaged rather than aliased. Crop, resize, flip and per-channel normalisation
// are one pass into the engine's CHW floats.
#include <array>

#include "models/data/image_decode.h"

namespace pw::models::data {

// Normalization: pipewright/dataset.h.
inline constexpr Normalization kImageNetNormalization{{0.485f, 0.456f, 0.406f}, {0.229f, 0.224f, 0.225f}};
inline constexpr Normalization kNoNormalization{{0.0f, 0.0f, 0.0f}, {1.0f, 1.0f, 1.0f}};

// A region of an image in its pixel coordinates; fractional after a reduced (DCT-scaled) decode.
struct Box {
  double left = 0, top = 0, width = 0, height = 0;
};

struct Window {
  int left = 0, top = 0, width = 0, height = 0;
};

// Resizes `box` of `image` to `resized` pixels and writes the part `window` of the result to `out`
// as 3 x window.height x window.width floats, (pixel / 255 - mean) / std per channel, mirrored
// left to right when `flip`.
void resample(const RgbImage& image, Box box, ImageSize resized, Window window, bool flip,
              const Normalization& normalization, float* out);

}  // namespace pw::models::data
