// JPEG through TurboJPEG (the libjpeg-turbo 2.1 API Debian ships).
#include <turbojpeg.h>

#include <memory>
#include <string>

#include "core/error.h"
#include "models/data/image_codecs.h"

namespace pw::models::data::codecs {
namespace {

// Above this many pixels a header is taken for a corrupt one rather than allocated for.
constexpr std::int64_t kMaxPixels = std::int64_t{1} << 28;

struct HandleDeleter {
  void operator()(void* h) const { tjDestroy(h); }
};
using Handle = std::unique_ptr<void, HandleDeleter>;

// One decompressor per thread: a handle is not safe to share, and making one per image costs.
// After a failure the handle is replaced: TurboJPEG 2.1 can leave it unusable for the next file.
Handle& thread_handle() {
  thread_local Handle handle;
  if (!handle) {
    handle.reset(tjInitDecompress());
    PW_CHECK(handle != nullptr, "tjInitDecompress failed: " << tjGetErrorStr2(nullptr));
  }
  return handle;
}

[[noreturn]] void fail(const EncodedSample& sample, const std::string& what) {
  const std::string message = one_line(tjGetErrorStr2(thread_handle().get()));
  thread_handle().reset();
  throw InputError(sample.name + ": " + what + " (" + message + ")");
}

struct Header {
  int width = 0, height = 0, subsampling = 0, colorspace = 0;
};

Header read_header(tjhandle h, const EncodedSample& sample) {
  Header hd;
  const int rc = tjDecompressHeader3(h, sample.bytes.data(), static_cast<unsigned long>(sample.bytes.size()),
                                     &hd.width, &hd.height, &hd.subsampling, &hd.colorspace);
  if (rc != 0) fail(sample, "corrupt JPEG header");
  // A header cut short can still "parse" (libjpeg inserts a fake end of file), with no frame.
  PW_INPUT_CHECK(hd.width > 0 && hd.height > 0, sample.name << ": corrupt JPEG header (no frame size)");
  PW_INPUT_CHECK(std::int64_t{hd.width} * hd.height <= kMaxPixels,
                 sample.name << ": JPEG of " << hd.width << "x" << hd.height << " pixels is larger than the "
                             << kMaxPixels << " accepted");
  return hd;
}

// The smallest of 1/1, 1/2, 1/4, 1/8 that TurboJPEG offers and that is >= min_scale (as PIL's draft()).
tjscalingfactor scale_for(double min_scale) {
  int count = 0;
  const tjscalingfactor* factors = tjGetScalingFactors(&count);
  tjscalingfactor best{1, 1};
  for (int i = 0; i < count; ++i) {
    const auto f = factors[i];
    const bool power_of_two = f.num == 1 && (f.denom == 2 || f.denom == 4 || f.denom == 8);
    if (power_of_two && static_cast<double>(f.num) / f.denom >= min_scale &&
        static_cast<double>(f.num) / f.denom < static_cast<double>(best.num) / best.denom)
      best = f;
  }
  return best;
}

// PIL reads every CMYK JPEG as Adobe's inverted CMYK ("CMYK;I"), then converts with
// rgb = (255 - k) - (255 - k) * c / 255, rounded as its MULDIV255.
std::uint8_t cmyk_channel(std::uint8_t stored_ink, std::uint8_t stored_black) {
  const int ink = 255 - stored_ink;
  const int not_black = stored_black;   // 255 - (255 - stored)
  const int t = ink * not_black + 128;
  return static_cast<std::uint8_t>(not_black - (((t >> 8) + t) >> 8));
}

bool is_only_a_warning(tjhandle h) {
  // Truncation is a warning to libjpeg (the rest is filled grey) but an error to PIL and to us;
  // other warnings (extraneous bytes before a marker, ...) PIL accepts, and so do we.
  const std::string message = tjGetErrorStr2(h);
  return tjGetErrorCode(h) == TJERR_WARNING && message.find("Premature end") == std::string::npos;
}

}  // namespace

ImageSize jpeg_size(const EncodedSample& sample) {
  const Header hd = read_header(thread_handle().get(), sample);
  return {hd.width, hd.height};
}

RgbImage decode_jpeg(const EncodedSample& sample, double min_scale) {
  tjhandle h = thread_handle().get();
  const Header hd = read_header(h, sample);
  const tjscalingfactor scale = scale_for(min_scale);
  RgbImage image;
  image.width = TJSCALED(hd.width, scale);
  image.height = TJSCALED(hd.height, scale);
  const bool cmyk = hd.colorspace == TJCS_CMYK || hd.colorspace == TJCS_YCCK;
  const int channels = cmyk ? 4 : 3;
  std::vector<std::uint8_t> decoded(static_cast<std::size_t>(image.width) * image.height * channels);
  const int rc = tjDecompress2(h, sample.bytes.data(), static_cast<unsigned long>(sample.bytes.size()), decoded.data(),
                               image.width, image.width * channels, image.height, cmyk ? TJPF_CMYK : TJPF_RGB, 0);
  if (rc != 0 && !is_only_a_warning(h)) fail(sample, "cannot decode JPEG");
  if (!cmyk) {
    image.pixels = std::move(decoded);
    return image;
  }
  image.pixels.resize(static_cast<std::size_t>(image.width) * image.height * 3);
  for (std::size_t p = 0, n = image.pixels.size() / 3; p < n; ++p)
    for (int c = 0; c < 3; ++c) image.pixels[p * 3 + c] = cmyk_channel(decoded[p * 4 + c], decoded[p * 4 + 3]);
  return image;
}

}  // namespace pw::models::data::codecs
