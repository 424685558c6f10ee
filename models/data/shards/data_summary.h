#pragma once
// What `pipewright data inspect` reports of an image folder or a shard folder: classes, samples
// per split and per class, the encoded (file) sizes, the images' widths and heights (headers
// only) and how fast this machine decodes them (image_survey.h).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "models/data/image_survey.h"
#include "models/data/shards/shard_source.h"

namespace pw::models::data::shards {

// Nearest-rank percentiles of byte counts; all zero for no samples.
struct ByteStats {
  std::int64_t min = 0;
  std::int64_t median = 0;
  std::int64_t p90 = 0;
  std::int64_t max = 0;
};
ByteStats byte_stats(std::vector<std::int64_t> sizes);

struct SplitSummary {
  std::string name;                          // "train", "val"
  std::int64_t samples = 0;
  std::vector<std::int64_t> class_counts;
  ByteStats encoded_bytes;
  SizeSurvey image_sizes;                    // of a sample of at most SurveyLimits::size_samples
  std::int64_t shards = 0;                   // tar shards only
};

struct DataSummary {
  std::string kind;                          // "image folder" or "tar shards"
  std::string path;
  std::vector<std::string> classes;
  std::vector<SplitSummary> splits;
  std::optional<ShardCheck> verified;        // tar shards read in full (verify = true)
  std::optional<DecodeSurvey> decode;        // of the first split's images (none: decode_samples 0)
};

// `path`: an image folder (ROOT/train/CLASS/...) or a shard folder, shard file or pattern; for
// shards, verify reads every shard (ShardSource::verify). InputError when it is neither. `limits`
// bound the images whose headers are read (per split) and those decoded (of the first split).
DataSummary summarize_data(const std::string& path, bool verify, const SurveyLimits& limits = {});

}  // namespace pw::models::data::shards
