#pragma once
// The index of one split's tar shards (OUT/index-train.bin): for every sample, which shard holds
// it, where its image member's bytes start and how many there are, the member's extension and the
// label, so a sample is read with one pread and a label without touching the tar. Layout:
// docs/formats.md ("Tar shards").
#include <cstdint>
#include <string>
#include <vector>

namespace pw::models::data::shards {

inline constexpr std::uint32_t kShardIndexVersion = 1;
// The largest index file read (16 GiB, about 100 million samples): a larger file is refused unread.
inline constexpr std::int64_t kMaxShardIndexBytes = std::int64_t{16} << 30;

struct IndexedShard {
  std::string file;          // name inside the shard folder: "train-000000.tar"
  std::int64_t bytes = 0;    // the shard file's size when packed
};

struct IndexedSample {
  std::uint32_t shard = 0;   // into ShardIndex::shards
  std::int64_t offset = 0;   // of the image member's data in the shard file
  std::int64_t size = 0;     // of the image member's data
  std::int64_t label = 0;
  std::string key;           // tar member key: members KEY.EXT and KEY.cls
  std::string extension;     // "jpg", "jpeg" or "png"
  std::string source;        // the packed file, relative to its split folder: "CLASS/file.jpg"
};

struct ShardIndex {
  std::vector<IndexedShard> shards;
  std::vector<IndexedSample> samples;
};

// Bytes of the file, ending with a checksum of all that precedes it.
std::string encode_shard_index(const ShardIndex& index);
// InputError naming `path` when the bytes are not an index of this version or are damaged.
ShardIndex decode_shard_index(const std::string& bytes, const std::string& path);

void write_shard_index(const std::string& path, const ShardIndex& index);   // durably
// The checksum an index file ends with (the manifest records it, tying the two together).
std::string shard_index_checksum(const std::string& encoded);
// Reads and decodes; `checksum`, when given, receives shard_index_checksum of the file.
ShardIndex read_shard_index(const std::string& path, std::string* checksum = nullptr);

}  // namespace pw::models::data::shards
