#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <boost/test/unit_test.hpp>

#include "models/data/image_decode.h"
#include "tests/models/data/idx_test_files.h"
#include "tests/models/data/image_test_files.h"

namespace pw::models::data {
namespace {

using test::Bytes;
using test::MessageMentions;

double mean_abs_difference(const Bytes& a, const Bytes& b) {
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  double sum = 0;
  for (std::size_t i = 0; i < a.size(); ++i) sum += std::abs(int{a[i]} - int{b[i]});
  return sum / static_cast<double>(a.size());
}

Bytes grey_to_rgb(const Bytes& grey) {
  Bytes rgb;
  for (auto v : grey) rgb.insert(rgb.end(), {v, v, v});
  return rgb;
}

BOOST_AUTO_TEST_SUITE(image_decode)

BOOST_AUTO_TEST_CASE(png_round_trips_rgb_exactly_and_reads_the_size_from_the_header) {
  const Bytes pixels = test::smooth_pixels(37, 23, 3);
  const auto sample = test::sample_of(test::encode_png(pixels.data(), 37, 23, PNG_FORMAT_RGB));
  const auto size = encoded_image_size(sample);
  BOOST_TEST(size.width == 37);
  BOOST_TEST(size.height == 23);
  const RgbImage image = decode_image(sample);
  BOOST_TEST(image.width == 37);
  BOOST_TEST(image.height == 23);
  BOOST_TEST(image.pixels == pixels);
}

BOOST_AUTO_TEST_CASE(png_grey_grey_alpha_rgba_palette_and_16_bit_become_rgb_as_pil_converts_them) {
  const Bytes grey = test::smooth_pixels(16, 9, 1);
  BOOST_TEST(decode_image(test::sample_of(test::encode_png(grey.data(), 16, 9, PNG_FORMAT_GRAY))).pixels ==
             grey_to_rgb(grey));

  Bytes grey_alpha;   // alpha is dropped, not composited
  for (auto v : grey) grey_alpha.insert(grey_alpha.end(), {v, static_cast<std::uint8_t>(v / 3)});
  BOOST_TEST(decode_image(test::sample_of(test::encode_png(grey_alpha.data(), 16, 9, PNG_FORMAT_GA))).pixels ==
             grey_to_rgb(grey));

  const Bytes rgba = test::smooth_pixels(16, 9, 4);
  Bytes rgb;
  for (std::size_t p = 0; p < rgba.size(); p += 4) rgb.insert(rgb.end(), rgba.begin() + p, rgba.begin() + p + 3);
  BOOST_TEST(decode_image(test::sample_of(test::encode_png(rgba.data(), 16, 9, PNG_FORMAT_RGBA))).pixels == rgb);

  const Bytes palette{0, 0, 0, 255, 0, 0, 10, 200, 30, 255, 255, 255};
  Bytes indexes(16 * 9), expected;
  for (std::size_t i = 0; i < indexes.size(); ++i) {
    indexes[i] = static_cast<std::uint8_t>((i * 7) % 4);
    expected.insert(expected.end(), palette.begin() + indexes[i] * 3, palette.begin() + indexes[i] * 3 + 3);
  }
  const auto paletted = test::encode_png(indexes.data(), 16, 9, PNG_FORMAT_RGB_COLORMAP, palette.data(), 4);
  BOOST_TEST(decode_image(test::sample_of(paletted)).pixels == expected);

  std::vector<std::uint16_t> deep(rgb.size());   // 16-bit samples keep their high byte
  for (std::size_t i = 0; i < deep.size(); ++i) deep[i] = static_cast<std::uint16_t>(rgb[i] * 256 + (i * 37) % 256);
  BOOST_TEST(decode_image(test::sample_of(test::encode_png(deep.data(), 16, 9, PNG_FORMAT_LINEAR_RGB))).pixels == rgb);
}

BOOST_AUTO_TEST_CASE(jpeg_round_trips_rgb_and_grey_within_compression_error) {
  const Bytes pixels = test::smooth_pixels(64, 48, 3);
  const RgbImage image = decode_image(test::sample_of(test::encode_jpeg(pixels, 64, 48, TJPF_RGB)));
  BOOST_TEST(image.width == 64);
  BOOST_TEST(image.height == 48);
  BOOST_TEST(mean_abs_difference(image.pixels, pixels) < 1.5);

  const Bytes grey = test::smooth_pixels(28, 28, 1, 3);   // Fashion-MNIST's size
  const RgbImage grey_image = decode_image(test::sample_of(test::encode_jpeg(grey, 28, 28, TJPF_GRAY)));
  BOOST_TEST(mean_abs_difference(grey_image.pixels, grey_to_rgb(grey)) < 1.5);
  for (std::size_t p = 0; p < grey_image.pixels.size(); p += 3) {
    BOOST_TEST(grey_image.pixels[p] == grey_image.pixels[p + 1]);
    BOOST_TEST(grey_image.pixels[p] == grey_image.pixels[p + 2]);
  }
}

BOOST_AUTO_TEST_CASE(cmyk_jpeg_is_read_as_adobe_inverted_and_converted_with_pils_formula) {
  // Stored CMYK (10, 200, 30, 100) everywhere; PIL reads 255 - stored as the inks (its "CMYK;I"),
  // and Image.new("CMYK", size, (245, 55, 225, 155)).convert("RGB") is (4, 78, 12) in Pillow 9.4.
  Bytes stored;
  for (int i = 0; i < 16 * 16; ++i) stored.insert(stored.end(), {10, 200, 30, 100});
  const RgbImage image = decode_image(test::sample_of(test::encode_jpeg(stored, 16, 16, TJPF_CMYK, 100)));
  BOOST_REQUIRE_EQUAL(image.pixels.size(), 16u * 16u * 3u);
  for (std::size_t p = 0; p < image.pixels.size(); p += 3) {
    BOOST_TEST(std::abs(image.pixels[p] - 4) <= 2);
    BOOST_TEST(std::abs(image.pixels[p + 1] - 78) <= 2);
    BOOST_TEST(std::abs(image.pixels[p + 2] - 12) <= 2);
  }
}

BOOST_AUTO_TEST_CASE(scaled_jpeg_decode_picks_the_largest_reduction_and_matches_a_downsampled_full_decode) {
  const Bytes pixels = test::smooth_pixels(256, 192, 3, 1);
  const auto sample = test::sample_of(test::encode_jpeg(pixels, 256, 192, TJPF_RGB));
  const RgbImage full = decode_image(sample);
  const std::pair<double, int> cases[] = {{1.0, 1}, {0.6, 1}, {0.5, 2}, {0.3, 2}, {0.25, 4}, {0.2, 4}, {0.125, 8}, {0.01, 8}};
  for (const auto& [min_scale, reduction] : cases) {
    BOOST_TEST_CONTEXT("min_scale " << min_scale) {
      const RgbImage scaled = decode_image(sample, min_scale);
      BOOST_TEST(scaled.width == 256 / reduction);
      BOOST_TEST(scaled.height == 192 / reduction);
      Bytes box(scaled.pixels.size());   // the full decode averaged over reduction x reduction blocks
      for (int y = 0; y < scaled.height; ++y)
        for (int x = 0; x < scaled.width; ++x)
          for (int c = 0; c < 3; ++c) {
            int sum = 0;
            for (int dy = 0; dy < reduction; ++dy)
              for (int dx = 0; dx < reduction; ++dx)
                sum += full.pixels[((y * reduction + dy) * 256 + x * reduction + dx) * 3 + c];
            box[(y * scaled.width + x) * 3 + c] = static_cast<std::uint8_t>(sum / (reduction * reduction));
          }
      BOOST_TEST(mean_abs_difference(scaled.pixels, box) < 2.0);
    }
  }
  // PNG has no reduced decode: the whole image comes back.
  const auto png = test::sample_of(test::encode_png(pixels.data(), 256, 192, PNG_FORMAT_RGB));
  BOOST_TEST(decode_image(png, 0.125).width == 256);
}

BOOST_AUTO_TEST_CASE(empty_garbage_unsupported_and_truncated_files_are_one_line_errors_naming_the_file) {
  const Bytes pixels = test::smooth_pixels(64, 48, 3);
  BOOST_CHECK_EXCEPTION(decode_image(test::sample_of({}, "cls/empty.jpg")), InputError,
                        MessageMentions{"cls/empty.jpg: empty file"});
  BOOST_CHECK_EXCEPTION(decode_image(test::sample_of({'G', 'I', 'F', '8', '9', 'a', 0, 0}, "x/anim.gif")), InputError,
                        MessageMentions{"x/anim.gif: unsupported image format"});

  Bytes jpeg = test::encode_jpeg(pixels, 64, 48, TJPF_RGB);
  Bytes cut(jpeg.begin(), jpeg.begin() + static_cast<std::ptrdiff_t>(jpeg.size() / 2));
  BOOST_CHECK_EXCEPTION(decode_image(test::sample_of(cut, "half.jpg")), InputError,
                        MessageMentions{"half.jpg: cannot decode JPEG"});
  Bytes header_only(jpeg.begin(), jpeg.begin() + 8);
  BOOST_CHECK_EXCEPTION(decode_image(test::sample_of(header_only, "stub.jpg")), InputError,
                        MessageMentions{"stub.jpg: corrupt JPEG header"});
  Bytes garbage = jpeg;
  for (std::size_t i = 3; i < garbage.size(); ++i) garbage[i] = static_cast<std::uint8_t>(i * 131 + 7);
  BOOST_CHECK_EXCEPTION(decode_image(test::sample_of(garbage, "noise.jpg")), InputError, MessageMentions{"noise.jpg: "});

  Bytes png = test::encode_png(pixels.data(), 64, 48, PNG_FORMAT_RGB);
  Bytes png_cut(png.begin(), png.begin() + static_cast<std::ptrdiff_t>(png.size() * 2 / 3));
  BOOST_CHECK_EXCEPTION(decode_image(test::sample_of(png_cut, "two_thirds.png")), InputError,
                        MessageMentions{"two_thirds.png: cannot decode PNG (truncated file)"});
  Bytes png_stub(png.begin(), png.begin() + 12);
  BOOST_CHECK_EXCEPTION(encoded_image_size(test::sample_of(png_stub, "stub.png")), InputError,
                        MessageMentions{"stub.png: corrupt PNG header"});
  Bytes png_garbage = png;
  for (std::size_t i = 40; i < png_garbage.size(); ++i) png_garbage[i] ^= 0x5A;
  BOOST_CHECK_EXCEPTION(decode_image(test::sample_of(png_garbage, "flipped.png")), InputError,
                        MessageMentions{"flipped.png: corrupt PNG header (sRG"});
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
}  // namespace pw::models::data
