// Synthetic labelled images generated per index: class pattern + noise, nothing stored per sample.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "models/data/dataset.h"
#include "models/rng.h"

namespace pw::models::data {
namespace {

constexpr double kTwoPi = 6.283185307179586;
constexpr float kNoiseAmplitude = 1.0f;   // noise is uniform in [-1, 1]; patterns have amplitude 1

// One channel of one class's pattern: offset + sin(2*pi*(fx*x/W + fy*y/H) + phase).
struct Wave {
  int fx = 0;
  int fy = 0;
  double phase = 0.0;
  float offset = 0.0f;
};

// Distinct wave vectors, lowest frequencies first, none above Nyquist. Distinct frequencies rather
// than phases, because a convolution followed by global pooling barely sees a phase shift.
std::vector<std::pair<int, int>> wave_vectors(int wanted, std::int64_t height, std::int64_t width) {
  const int max_radius = static_cast<int>(std::max<std::int64_t>(1, std::min(height, width) / 2));
  std::vector<std::pair<int, int>> out;
  for (int r = 1; r <= max_radius && static_cast<int>(out.size()) < wanted; ++r) {
    for (int fy = 0; fy <= r; ++fy) {
      for (int fx = -r; fx <= r; ++fx) {
        if (std::max(std::abs(fx), fy) != r || (fy == 0 && fx < 0)) continue;   // (-f, 0) repeats (f, 0)
        out.emplace_back(fx, fy);
      }
    }
  }
  return out;
}

class SyntheticImages final : public Dataset {
 public:
  SyntheticImages(std::int64_t size, kernels::Shape shape, int num_classes, std::uint64_t seed, Split split)
      : size_(size), shape_(std::move(shape)), num_classes_(num_classes), seed_(seed), split_(split) {
    PW_INPUT_CHECK(size_ >= 0, "synthetic data set size " << size_ << " is negative; expected a count >= 0");
    PW_INPUT_CHECK(shape_.size() == 3 && shape_[0] > 0 && shape_[1] > 0 && shape_[2] > 0,
                   "synthetic sample shape " << kernels::shape_str(shape_)
                                             << " is not usable; expected {C, H, W} with positive sides");
    PW_INPUT_CHECK(num_classes_ >= 1, "synthetic data set with " << num_classes_ << " classes; expected at least 1");
    sample_seed_ = hash_name(seed, split == Split::Train ? "synthetic/train" : "synthetic/test");
    const auto vectors = wave_vectors(num_classes_, shape_[1], shape_[2]);
    Rng rng(hash_name(seed, "synthetic/patterns"));
    for (int c = 0; c < num_classes_; ++c) {
      const auto [fx, fy] = vectors[static_cast<std::size_t>(c) % vectors.size()];
      for (std::int64_t ch = 0; ch < shape_[0]; ++ch) {
        waves_.push_back({fx, fy, rng.uniform(0.0, kTwoPi), static_cast<float>(rng.uniform(-0.5, 0.5))});
      }
    }
  }

  std::int64_t size() const override { return size_; }
  kernels::Shape sample_shape() const override { return shape_; }
  int num_classes() const override { return num_classes_; }
  std::string name() const override {
    return "synthetic " + std::to_string(shape_[0]) + "x" + std::to_string(shape_[1]) + "x" +
           std::to_string(shape_[2]) + " (" + std::to_string(num_classes_) + " classes, seed " +
           std::to_string(seed_) + (split_ == Split::Train ? ", train)" : ", test)");
  }

  void fill(std::int64_t index, float* image_out, std::int64_t& label_out) const override {
    PW_CHECK(index >= 0 && index < size_, "sample " << index << " outside the synthetic set's " << size_);
    Rng rng(sample_seed_ ^ splitmix64(static_cast<std::uint64_t>(index)));
    const auto label = static_cast<std::int64_t>(
        (static_cast<unsigned __int128>(rng.next_u64()) * static_cast<unsigned>(num_classes_)) >> 64);
    label_out = label;

    const std::int64_t channels = shape_[0], height = shape_[1], width = shape_[2];
    // sin(a + b) = sin a cos b + cos a sin b: 2(H + W) trig calls per channel instead of H * W.
    std::vector<float> sin_x(width), cos_x(width), sin_y(height), cos_y(height);
    std::uint64_t bits = 0;
    int bits_left = 0;
    float* out = image_out;
    for (std::int64_t ch = 0; ch < channels; ++ch) {
      const Wave& wave = waves_[static_cast<std::size_t>(label * channels + ch)];
      for (std::int64_t x = 0; x < width; ++x) {
        const double a = kTwoPi * wave.fx * static_cast<double>(x) / static_cast<double>(width) + wave.phase;
        sin_x[x] = static_cast<float>(std::sin(a));
        cos_x[x] = static_cast<float>(std::cos(a));
      }
      for (std::int64_t y = 0; y < height; ++y) {
        const double b = kTwoPi * wave.fy * static_cast<double>(y) / static_cast<double>(height);
        sin_y[y] = static_cast<float>(std::sin(b));
        cos_y[y] = static_cast<float>(std::cos(b));
      }
      for (std::int64_t y = 0; y < height; ++y) {
        for (std::int64_t x = 0; x < width; ++x) {
          if (bits_left == 0) {
            bits = rng.next_u64();
            bits_left = 2;
          }
          const auto half = static_cast<std::uint32_t>(bits);
          bits >>= 32;
          --bits_left;
          const float noise = (static_cast<float>(half) * 0x1.0p-31f - 1.0f) * kNoiseAmplitude;
          *out++ = wave.offset + sin_x[x] * cos_y[y] + cos_x[x] * sin_y[y] + noise;
        }
      }
    }
  }

 private:
  std::int64_t size_;
  kernels::Shape shape_;
  int num_classes_;
  std::uint64_t seed_;
  Split split_;
  std::uint64_t sample_seed_ = 0;
  std::vector<Wave> waves_;   // [class][channel]
};

}  // namespace

std::unique_ptr<Dataset> make_synthetic_images(std::int64_t size, kernels::Shape sample_shape, int num_classes,
                                               std::uint64_t seed, Split split) {
  return std::make_unique<SyntheticImages>(size, std::move(sample_shape), num_classes, seed, split);
}

}  // namespace pw::models::data
