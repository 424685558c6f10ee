#pragma once
// What `pipewright data inspect` reports of an image folder or a shard folder: classes, samples
// per split and per class, and the encoded (file) sizes. Decoded image sizes need the decoder.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

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
  std::int64_t shards = 0;                   // tar shards only
};

struct DataSummary {
  std::string kind;                          // "image folder" or "tar shards"
  std::string path;
  std::vector<std::string> classes;
  std::vector<SplitSummary> splits;
  std::optional<ShardCheck> verified;        // tar shards read in full (verify = true)
};

// `path`: an image folder (ROOT/train/CLASS/...) or a shard folder, shard file or pattern; for
// shards, verify reads every shard (ShardSource::verify). InputError when it is neither.
DataSummary summarize_data(const std::string& path, bool verify);

}  // namespace pw::models::data::shards
