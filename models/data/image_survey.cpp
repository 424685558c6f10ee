#include "models/data/image_survey.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>
#include <set>

#include "core/clock.h"
#include "core/error.h"
#include "models/data/image_decode.h"

namespace pw::models::data {

Percentiles percentiles(std::vector<int> values) {
  Percentiles p;
  if (values.empty()) return p;
  std::sort(values.begin(), values.end());
  const auto rank = [&](double q) {
    const auto n = static_cast<double>(values.size());
    const auto r = static_cast<std::size_t>(std::max(1.0, std::ceil(q * n)));
    return values[std::min(r, values.size()) - 1];
  };
  p.min = values.front();
  p.p5 = rank(0.05);
  p.p50 = rank(0.5);
  p.p95 = rank(0.95);
  p.max = values.back();
  return p;
}

std::vector<std::int64_t> sample_indices(std::int64_t size, std::int64_t count, std::uint64_t seed) {
  std::vector<std::int64_t> out;
  if (size <= 0 || count <= 0) return out;
  if (size <= count) {
    out.resize(static_cast<std::size_t>(size));
    for (std::int64_t i = 0; i < size; ++i) out[static_cast<std::size_t>(i)] = i;
    return out;
  }
  // Floyd's algorithm: `count` distinct values, each subset equally likely, in O(count log count).
  std::mt19937_64 rng(seed);
  std::set<std::int64_t> chosen;
  for (std::int64_t j = size - count; j < size; ++j) {
    const std::int64_t t = std::uniform_int_distribution<std::int64_t>(0, j)(rng);
    chosen.insert(chosen.count(t) != 0 ? j : t);
  }
  return {chosen.begin(), chosen.end()};
}

namespace {

// The sample's bytes, or nullopt with the reason kept in `first_error` if it is the first failure.
std::optional<EncodedSample> read_or_note(const EncodedSource& source, std::int64_t index, std::string& first_error) {
  try {
    return source.read(index);
  } catch (const InputError& e) {
    if (first_error.empty()) first_error = e.what();
    return std::nullopt;
  }
}

}  // namespace

SizeSurvey survey_sizes(const EncodedSource& source, std::int64_t max_samples, std::uint64_t seed) {
  SizeSurvey s;
  std::vector<int> widths, heights;
  for (const std::int64_t i : sample_indices(source.size(), max_samples, seed)) {
    ++s.sampled;
    const auto sample = read_or_note(source, i, s.first_unreadable);
    if (!sample) continue;
    try {
      const ImageSize size = encoded_image_size(*sample);
      widths.push_back(size.width);
      heights.push_back(size.height);
      ++s.readable;
    } catch (const InputError& e) {
      if (s.first_unreadable.empty()) s.first_unreadable = e.what();
    }
  }
  s.width = percentiles(std::move(widths));
  s.height = percentiles(std::move(heights));
  return s;
}

DecodeSurvey time_decoding(const EncodedSource& source, std::int64_t max_samples, std::uint64_t seed) {
  DecodeSurvey d;
  std::string ignored;
  std::vector<EncodedSample> samples;
  for (const std::int64_t i : sample_indices(source.size(), max_samples, seed)) {
    ++d.sampled;
    if (auto sample = read_or_note(source, i, ignored)) samples.push_back(std::move(*sample));
  }
  for (const auto& sample : samples) {
    const auto start = Clock::now();
    try {
      const RgbImage image = decode_image(sample, 1.0);
      d.seconds += seconds_since(start);
      d.pixels += static_cast<std::int64_t>(image.width) * image.height;
      ++d.decoded;
    } catch (const InputError&) {
      // Counted by sampled - decoded; survey_sizes names the first bad file.
    }
  }
  return d;
}

}  // namespace pw::models::data
