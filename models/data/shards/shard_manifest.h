#pragma once
// OUT/manifest.json of a shard folder: format and version, the classes, and per split the sample
// counts, the index file and every shard file with its size and checksum. Written last by
// `pipewright data pack`, so a folder with a manifest is a complete pack.
#include <cstdint>
#include <string>
#include <vector>

#include "pipewright/dataset.h"

namespace pw::models::data::shards {

inline constexpr const char* kManifestFormat = "pipewright-tar-shards";
inline constexpr int kManifestVersion = 1;
inline constexpr const char* kManifestFile = "manifest.json";
// The largest manifest read (1 GiB, millions of shards): a larger file is refused unread.
inline constexpr std::int64_t kMaxManifestBytes = std::int64_t{1} << 30;

struct ManifestShard {
  std::string file;            // "train-000000.tar"
  std::int64_t bytes = 0;
  std::int64_t samples = 0;
  std::string checksum;        // core/durable_file.h's file_checksum of the whole file
};

struct ManifestSplit {
  std::string name;                        // "train" or "val"
  std::int64_t samples = 0;
  std::vector<std::int64_t> class_counts;  // samples per class, in class order
  std::string index_file;                  // "index-train.bin"
  std::string index_checksum;              // shard_index_checksum of that file
  std::vector<ManifestShard> shards;
};

struct ShardManifest {
  std::vector<std::string> classes;
  std::vector<ManifestSplit> splits;
  const ManifestSplit* find(const std::string& split_name) const;   // nullptr when absent
};

// The folder names of a split in an image folder and in a shard folder: Train "train", Test "val".
std::string split_folder_name(Split split);

std::string encode_shard_manifest(const ShardManifest& manifest);   // JSON text
// InputError naming `path` when the text is not a manifest of this format and version.
ShardManifest decode_shard_manifest(const std::string& text, const std::string& path);
void write_shard_manifest(const std::string& path, const ShardManifest& manifest);   // durably
ShardManifest read_shard_manifest(const std::string& path);

}  // namespace pw::models::data::shards
