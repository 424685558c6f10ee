// PNG through libpng's classic API (the simplified one would treat 16-bit samples as linear light
// and re-encode them as sRGB, which PIL does not). libpng reports errors by longjmp, so each call
// that may fail runs in a function holding its own setjmp and no objects with destructors.
#include <png.h>

#include <csetjmp>
#include <cstring>
#include <string>

#include "core/error.h"
#include "models/data/image_codecs.h"

namespace pw::models::data::codecs {
namespace {

constexpr std::int64_t kMaxPixels = std::int64_t{1} << 28;

struct PngInput {
  const std::uint8_t* data = nullptr;
  std::size_t size = 0;
  std::size_t pos = 0;
  char error[200] = {};
};

void on_error(png_structp png, png_const_charp message) {
  auto* in = static_cast<PngInput*>(png_get_error_ptr(png));
  std::strncpy(in->error, message, sizeof in->error - 1);
  png_longjmp(png, 1);
}
void on_warning(png_structp, png_const_charp) {}   // ancillary-chunk trouble: PIL ignores it too

void on_read(png_structp png, png_bytep out, png_size_t length) {
  auto* in = static_cast<PngInput*>(png_get_io_ptr(png));
  if (in->size - in->pos < length) png_error(png, "truncated file");
  std::memcpy(out, in->data + in->pos, length);
  in->pos += length;
}

// Reads the header and sets the transforms to 8-bit RGB as PIL's convert("RGB"): palettes looked
// up, grey replicated, alpha and tRNS dropped, 16-bit samples cut to their high byte.
bool read_header_as_rgb(png_structp png, png_infop info) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_info(png, info);
  const int color = png_get_color_type(png, info);
  const int depth = png_get_bit_depth(png, info);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (depth == 16) png_set_strip_16(png);
  if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
  if (color & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  return true;
}

bool read_rows(png_structp png, png_bytepp rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_image(png, rows);
  return true;
}

// Owns libpng's two structs, so they are freed when the reader's constructor throws too.
struct PngHandles {
  png_structp png = nullptr;
  png_infop info = nullptr;
  PngHandles() = default;
  PngHandles(const PngHandles&) = delete;
  PngHandles& operator=(const PngHandles&) = delete;
  ~PngHandles() { png_destroy_read_struct(&png, &info, nullptr); }
};

class PngReader {
 public:
  explicit PngReader(const EncodedSample& sample) : sample_(sample) {
    input_.data = sample.bytes.data();
    input_.size = sample.bytes.size();
    png_ = png_create_read_struct(PNG_LIBPNG_VER_STRING, &input_, on_error, on_warning);
    PW_CHECK(png_ != nullptr, "png_create_read_struct failed");
    info_ = png_create_info_struct(png_);
    PW_CHECK(info_ != nullptr, "png_create_info_struct failed");
    png_set_read_fn(png_, &input_, on_read);
    PW_INPUT_CHECK(read_header_as_rgb(png_, info_), sample.name << ": corrupt PNG header (" << input_.error << ")");
    size_ = {static_cast<int>(png_get_image_width(png_, info_)), static_cast<int>(png_get_image_height(png_, info_))};
    PW_INPUT_CHECK(std::int64_t{size_.width} * size_.height <= kMaxPixels,
                   sample.name << ": PNG of " << size_.width << "x" << size_.height << " pixels is larger than the "
                               << kMaxPixels << " accepted");
    PW_CHECK(png_get_rowbytes(png_, info_) == static_cast<png_size_t>(size_.width) * 3,
             sample.name << ": libpng's RGB rows are " << png_get_rowbytes(png_, info_) << " bytes");
  }

  ImageSize size() const { return size_; }

  RgbImage read() {
    RgbImage image{size_.width, size_.height, {}};
    image.pixels.resize(static_cast<std::size_t>(size_.width) * size_.height * 3);
    std::vector<png_bytep> rows(static_cast<std::size_t>(size_.height));
    for (std::size_t y = 0; y < rows.size(); ++y) rows[y] = image.pixels.data() + y * size_.width * 3;
    PW_INPUT_CHECK(read_rows(png_, rows.data()), sample_.name << ": cannot decode PNG (" << input_.error << ")");
    return image;
  }

 private:
  const EncodedSample& sample_;
  PngInput input_;
  PngHandles handles_;
  png_structp& png_ = handles_.png;
  png_infop& info_ = handles_.info;
  ImageSize size_;
};

}  // namespace

ImageSize png_size(const EncodedSample& sample) { return PngReader(sample).size(); }

RgbImage decode_png(const EncodedSample& sample) { return PngReader(sample).read(); }

}  // namespace pw::models::data::codecs
