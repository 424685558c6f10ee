#pragma once
// The decoders behind decode_image (image_decode.h), one per format. Each throws InputError
// "<sample name>: <what is wrong>" on a file it cannot read.
#include "models/data/image_decode.h"

namespace pw::models::data::codecs {

ImageSize jpeg_size(const EncodedSample& sample);
RgbImage decode_jpeg(const EncodedSample& sample, double min_scale);

ImageSize png_size(const EncodedSample& sample);
RgbImage decode_png(const EncodedSample& sample);

// A library's message as one line (no trailing newline or inner line breaks).
std::string one_line(std::string text);

}  // namespace pw::models::data::codecs
