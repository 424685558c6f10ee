#pragma once
// Decodes a JPEG (TurboJPEG) or PNG (libpng) file into 8-bit RGB, as PIL's Image.open(...).convert("RGB")
// makes it: grey is replicated, alpha is dropped (not composited), palettes are looked up, CMYK is
// converted with PIL's formula, 16-bit samples keep their high byte. A JPEG may be decoded at 1/2,
// 1/4 or 1/8 of its size with TurboJPEG's DCT scaling when the caller needs less (as PIL's draft
// mode). Any failure is a one-line InputError naming the sample and what is wrong.
#include <cstdint>
#include <vector>

#include "models/data/encoded_images.h"

namespace pw::models::data {

struct ImageSize {
  int width = 0;
  int height = 0;
};

struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<std::uint8_t> pixels;   // height x width x 3, row-major
};

// The stored image's size, from its header only.
ImageSize encoded_image_size(const EncodedSample& sample);

// Decodes at the smallest of the scales 1, 1/2, 1/4, 1/8 that is still >= min_scale (a JPEG
// only; PNG is always decoded whole). The result's size says which scale was used.
RgbImage decode_image(const EncodedSample& sample, double min_scale = 1.0);

}  // namespace pw::models::data
