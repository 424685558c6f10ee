#pragma once
// Packs an image folder (image_folder_listing.h) into WebDataset-style tar shards beside an index
// per split and a manifest: OUT/train-000000.tar ..., OUT/val-000000.tar ..., OUT/index-train.bin,
// OUT/index-val.bin, OUT/manifest.json (docs/formats.md, "Tar shards").
#include <cstdint>
#include <functional>
#include <string>

#include "models/data/shards/shard_manifest.h"

namespace pw::models::data::shards {

struct PackOptions {
  // A shard rolls over to the next before it would pass this size (a single larger sample gets a
  // shard of its own).
  std::int64_t shard_bytes = std::int64_t{256} << 20;
};

struct PackProgress {
  std::string split;                // "train" or "val"
  std::int64_t samples_done = 0;    // over both splits
  std::int64_t samples_total = 0;
  std::int64_t bytes_done = 0;      // image bytes read so far
  std::int64_t bytes_total = 0;
  std::int64_t shards_done = 0;     // shards completed
};
using PackProgressCallback = std::function<void(const PackProgress&)>;

// OUT must be absent or an empty folder. Every file is written durably under a temporary name and
// renamed, the manifest last; on any failure the files this call made are removed again (OUT too
// if it made it) and the InputError names the file and the reason.
ShardManifest pack_image_folder(const std::string& root, const std::string& out, const PackOptions& options = {},
                                const PackProgressCallback& progress = {});

// The shard file names: "train-000000.tar".
std::string shard_file_name(const std::string& split, std::int64_t number);
std::string index_file_name(const std::string& split);   // "index-train.bin"

}  // namespace pw::models::data::shards
