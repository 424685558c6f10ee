#include "models/data/image_resample.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"

namespace pw::models::data {
namespace {

// The input pixels and weights behind each output pixel along one axis, as PIL's
// precompute_coeffs and PyTorch's _upsample_bilinear2d_aa compute them.
struct Taps {
  std::vector<int> first;        // first input pixel of output i
  std::vector<int> count;        // how many input pixels it reads
  std::vector<float> weights;    // max_count per output pixel
  int max_count = 0;
};

// As torchvision crops and then resizes, the filter reads only pixels of the box (rounded out
// to whole pixels when a reduced decode made it fractional).
Taps taps(double box_start, double box_length, int input_size, int output_size, int first_out, int out_count) {
  const double scale = box_length / output_size;
  const double filter_scale = std::max(scale, 1.0);
  const double support = filter_scale;   // the triangle's half-width 1, widened when shrinking
  const int start = std::max(static_cast<int>(std::floor(box_start)), 0);
  const int end = std::min(static_cast<int>(std::ceil(box_start + box_length)), input_size);
  const double offset = box_start - start;
  Taps t;
  t.max_count = static_cast<int>(std::ceil(support)) * 2 + 1;
  t.first.resize(out_count);
  t.count.resize(out_count);
  t.weights.assign(static_cast<std::size_t>(out_count) * t.max_count, 0.0f);
  for (int i = 0; i < out_count; ++i) {
    const double center = offset + (first_out + i + 0.5) * scale;
    const int lo = std::max(static_cast<int>(center - support + 0.5), 0);
    const int hi = std::min(static_cast<int>(center + support + 0.5), end - start);
    const int n = std::min(std::max(hi - lo, 0), t.max_count);
    float* w = &t.weights[static_cast<std::size_t>(i) * t.max_count];
    double total = 0;
    for (int j = 0; j < n; ++j) {
      const double x = std::abs((j + lo - center + 0.5) / filter_scale);
      w[j] = static_cast<float>(x < 1.0 ? 1.0 - x : 0.0);
      total += w[j];
    }
    if (total > 0)
      for (int j = 0; j < n; ++j) w[j] = static_cast<float>(w[j] / total);
    t.first[i] = start + lo;
    t.count[i] = n;
  }
  return t;
}

}  // namespace

void resample(const RgbImage& image, Box box, ImageSize resized, Window window, bool flip,
              const Normalization& normalization, float* out) {
  PW_CHECK(window.left >= 0 && window.top >= 0 && window.left + window.width <= resized.width &&
               window.top + window.height <= resized.height && window.width > 0 && window.height > 0,
           "window " << window.left << "," << window.top << " " << window.width << "x" << window.height
                     << " outside the resized " << resized.width << "x" << resized.height);
  const Taps across = taps(box.left, box.width, image.width, resized.width, window.left, window.width);
  const Taps down = taps(box.top, box.height, image.height, resized.height, window.top, window.height);

  // Horizontal pass over the input rows the vertical taps read, then the vertical pass.
  const int row_lo = down.first.front();
  int row_hi = row_lo;
  for (int i = 0; i < window.height; ++i) row_hi = std::max(row_hi, down.first[i] + down.count[i]);
  const int rows = row_hi - row_lo;
  std::vector<float> wide(static_cast<std::size_t>(rows) * window.width * 3);
  for (int r = 0; r < rows; ++r) {
    const std::uint8_t* src = image.pixels.data() + static_cast<std::size_t>(row_lo + r) * image.width * 3;
    float* dst = wide.data() + static_cast<std::size_t>(r) * window.width * 3;
    for (int x = 0; x < window.width; ++x) {
      const float* w = &across.weights[static_cast<std::size_t>(x) * across.max_count];
      const std::uint8_t* p = src + static_cast<std::size_t>(across.first[x]) * 3;
      float s0 = 0, s1 = 0, s2 = 0;
      for (int j = 0; j < across.count[x]; ++j) {
        s0 += w[j] * p[j * 3];
        s1 += w[j] * p[j * 3 + 1];
        s2 += w[j] * p[j * 3 + 2];
      }
      dst[x * 3] = s0, dst[x * 3 + 1] = s1, dst[x * 3 + 2] = s2;
    }
  }
  const std::size_t plane = static_cast<std::size_t>(window.height) * window.width;
  std::array<float, 3> gain{}, offset{};
  for (int c = 0; c < 3; ++c) {
    gain[c] = 1.0f / (255.0f * normalization.std[c]);
    offset[c] = -normalization.mean[c] / normalization.std[c];
  }
  for (int y = 0; y < window.height; ++y) {
    const float* w = &down.weights[static_cast<std::size_t>(y) * down.max_count];
    const float* col0 = wide.data() + static_cast<std::size_t>(down.first[y] - row_lo) * window.width * 3;
    for (int x = 0; x < window.width; ++x) {
      float s0 = 0, s1 = 0, s2 = 0;
      const float* p = col0 + x * 3;
      const std::size_t stride = static_cast<std::size_t>(window.width) * 3;
      for (int j = 0; j < down.count[y]; ++j) {
        s0 += w[j] * p[j * stride];
        s1 += w[j] * p[j * stride + 1];
        s2 += w[j] * p[j * stride + 2];
      }
      const std::size_t at = static_cast<std::size_t>(y) * window.width + (flip ? window.width - 1 - x : x);
      out[at] = s0 * gain[0] + offset[0];
      out[plane + at] = s1 * gain[1] + offset[1];
      out[2 * plane + at] = s2 * gain[2] + offset[2];
    }
  }
}

}  // namespace pw::models::data
