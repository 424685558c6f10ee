#pragma once
// Encodes test images in memory (TurboJPEG, libpng) and makes smooth generated content, so the
// decoders are checked on files the tests write themselves.
#include <png.h>
#include <turbojpeg.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "models/data/encoded_images.h"

namespace pw::test {

using Bytes = std::vector<std::uint8_t>;

// Smooth content (gradients and a soft blob) with `channels` interleaved channels, as clothing
// photographs are: JPEG keeps it well, so round trips can be compared with a tight tolerance.
inline Bytes smooth_pixels(int width, int height, int channels, int seed = 0) {
  Bytes out(static_cast<std::size_t>(width) * height * channels);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      for (int c = 0; c < channels; ++c) {
        const double u = static_cast<double>(x) / width, v = static_cast<double>(y) / height;
        const double blob = std::exp(-((u - 0.5) * (u - 0.5) + (v - 0.4) * (v - 0.4)) * (8.0 + seed % 5));
        const double value = 40 + 120 * blob + 60 * std::sin(3.0 * u + c + seed) * std::cos(2.0 * v - c);
        out[(static_cast<std::size_t>(y) * width + x) * channels + c] =
            static_cast<std::uint8_t>(std::lround(std::clamp(value, 0.0, 255.0)));
      }
  return out;
}

// pixel_format: TJPF_RGB, TJPF_GRAY or TJPF_CMYK.
inline Bytes encode_jpeg(const Bytes& pixels, int width, int height, int pixel_format, int quality = 95) {
  tjhandle h = tjInitCompress();
  BOOST_REQUIRE(h != nullptr);
  unsigned char* jpeg = nullptr;
  unsigned long size = 0;
  const int subsampling = pixel_format == TJPF_GRAY ? TJSAMP_GRAY : TJSAMP_444;
  const int rc = tjCompress2(h, pixels.data(), width, width * tjPixelSize[pixel_format], height, pixel_format, &jpeg,
                             &size, subsampling, quality, 0);
  BOOST_REQUIRE_MESSAGE(rc == 0, tjGetErrorStr2(h));
  Bytes out(jpeg, jpeg + size);
  tjFree(jpeg);
  tjDestroy(h);
  return out;
}

// format: PNG_FORMAT_RGB, PNG_FORMAT_GRAY, PNG_FORMAT_GA, PNG_FORMAT_RGBA, or with
// PNG_FORMAT_FLAG_LINEAR for 16-bit samples (then `pixels` holds native-endian uint16 values).
inline Bytes encode_png(const void* pixels, int width, int height, png_uint_32 format,
                        const void* colormap = nullptr, int colormap_entries = 0) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(width);
  image.height = static_cast<png_uint_32>(height);
  image.format = format;
  image.colormap_entries = static_cast<png_uint_32>(colormap_entries);
  png_alloc_size_t size = 0;
  BOOST_REQUIRE(png_image_write_to_memory(&image, nullptr, &size, 0, pixels, 0, colormap));
  Bytes out(size);
  BOOST_REQUIRE_MESSAGE(png_image_write_to_memory(&image, out.data(), &size, 0, pixels, 0, colormap), image.message);
  out.resize(size);
  return out;
}

inline models::data::EncodedSample sample_of(Bytes bytes, std::string name = "test.img", std::int64_t label = 0) {
  return {std::move(bytes), std::move(name), label};
}

// Writes `bytes` to `path`, making its folders.
inline void write_file(const std::string& path, const Bytes& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace pw::test
