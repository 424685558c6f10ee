#pragma once
// What `pipewright data inspect` measures of the images themselves (not only their files): the
// spread of their widths and heights, from the headers alone (TurboJPEG's tjDecompressHeader3,
// libpng's IHDR), and how fast this machine decodes them in full on one thread. Both look at a
// seeded sample when the set is large. An image that cannot be read is counted, not fatal: inspect
// is where a user learns which files are bad.
#include <cstdint>
#include <string>
#include <vector>

#include "models/data/encoded_images.h"

namespace pw::models::data {

// Nearest-rank percentiles (the smallest value with at least p of the values at or below it);
// all zero for no values.
struct Percentiles {
  int min = 0;
  int p5 = 0;
  int p50 = 0;
  int p95 = 0;
  int max = 0;
};
Percentiles percentiles(std::vector<int> values);

// Up to `count` distinct indices of 0..size-1, in ascending order: all of them when size <= count,
// otherwise a sample drawn with `seed` (the same seed, the same sample).
std::vector<std::int64_t> sample_indices(std::int64_t size, std::int64_t count, std::uint64_t seed);

struct SizeSurvey {
  std::int64_t sampled = 0;          // images whose header was asked for
  std::int64_t readable = 0;         // ... and read: the percentiles are over these
  Percentiles width;
  Percentiles height;
  std::string first_unreadable;      // "NAME: what is wrong" of the first one that was not
};

struct DecodeSurvey {
  std::int64_t sampled = 0;
  std::int64_t decoded = 0;          // the ones timed (unreadable ones are skipped)
  std::int64_t pixels = 0;           // decoded, in total
  double seconds = 0.0;              // decoding only: the bytes are read before the clock starts
  double images_per_second() const { return seconds > 0 ? static_cast<double>(decoded) / seconds : 0.0; }
};

struct SurveyLimits {
  std::int64_t size_samples = 2000;    // headers read per split
  std::int64_t decode_samples = 200;   // images decoded in full
  std::uint64_t seed = 0;
};

// Widths and heights of at most `max_samples` images of `source` (sample_indices), headers only.
SizeSurvey survey_sizes(const EncodedSource& source, std::int64_t max_samples, std::uint64_t seed);

// Decodes at most `max_samples` images of `source` in full (scale 1) one after another on this
// thread, timing the decoding.
DecodeSurvey time_decoding(const EncodedSource& source, std::int64_t max_samples, std::uint64_t seed);

}  // namespace pw::models::data
