#include "models/data/image_decode.h"

#include <algorithm>
#include <array>

#include "core/error.h"
#include "models/data/image_codecs.h"

namespace pw::models::data {
namespace {

enum class Format { Jpeg, Png };

Format format_of(const EncodedSample& sample) {
  const auto& b = sample.bytes;
  PW_INPUT_CHECK(!b.empty(), sample.name << ": empty file; expected a JPEG or PNG image");
  static constexpr std::array<std::uint8_t, 3> kJpeg{0xFF, 0xD8, 0xFF};
  static constexpr std::array<std::uint8_t, 8> kPng{0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  auto starts_with = [&](const auto& magic) {
    return b.size() >= magic.size() && std::equal(magic.begin(), magic.end(), b.begin());
  };
  if (starts_with(kJpeg)) return Format::Jpeg;
  if (starts_with(kPng)) return Format::Png;
  PW_INPUT_CHECK(false, sample.name << ": unsupported image format (" << b.size()
                                    << " bytes that start like neither JPEG nor PNG); expected a JPEG or PNG image");
  return Format::Jpeg;
}

}  // namespace

ImageSize encoded_image_size(const EncodedSample& sample) {
  return format_of(sample) == Format::Jpeg ? codecs::jpeg_size(sample) : codecs::png_size(sample);
}

RgbImage decode_image(const EncodedSample& sample, double min_scale) {
  return format_of(sample) == Format::Jpeg ? codecs::decode_jpeg(sample, min_scale) : codecs::decode_png(sample);
}

namespace codecs {

std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  std::replace(text.begin(), text.end(), '\r', ' ');
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

}  // namespace codecs

}  // namespace pw::models::data
