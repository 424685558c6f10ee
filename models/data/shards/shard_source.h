#pragma once
// The encoded samples of one split of a shard folder (pack.h): read(i) preads the image member's
// bytes at the offset the index gives, label(i) comes from the index alone. Opening checks the
// manifest, the index and the shard files' sizes; verify() also reads every shard in full.
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "models/data/encoded_images.h"
#include "models/data/shards/shard_index.h"
#include "models/data/shards/shard_manifest.h"

namespace pw::models::data::shards {

struct ShardCheck {
  std::int64_t shards = 0;
  std::int64_t samples = 0;
  std::int64_t bytes = 0;
};

class ShardSource final : public EncodedSource {
 public:
  struct Shard {
    std::string path;
    ManifestShard manifest;
  };
  ShardSource(std::string description, ShardManifest manifest, std::vector<Shard> shards, std::vector<IndexedSample> samples);
  ~ShardSource() override;

  std::int64_t size() const override { return static_cast<std::int64_t>(samples_.size()); }
  std::vector<std::string> classes() const override { return manifest_.classes; }
  EncodedSample read(std::int64_t index) const override;
  std::int64_t label(std::int64_t index) const override;
  std::string name() const override { return description_; }

  const IndexedSample& indexed(std::int64_t index) const;   // shard (into shards()), offset, size, source
  const std::vector<Shard>& shards() const { return shards_; }
  const ShardManifest& manifest() const { return manifest_; }

  // Reads every shard of the source in full: its checksum against the manifest and, walking it
  // with libarchive, its members against the index (names, sizes, bytes at the indexed offsets,
  // labels in the .cls members). InputError naming the shard at the first difference.
  ShardCheck verify() const;

 private:
  int shard_fd(std::uint32_t shard) const;
  std::string member_name(const IndexedSample& s) const;

  std::string description_;
  ShardManifest manifest_;
  std::vector<Shard> shards_;
  std::vector<IndexedSample> samples_;   // IndexedSample::shard indexes shards_
  mutable std::vector<int> fds_;         // opened on first read
  std::unique_ptr<std::once_flag[]> opened_;
};

// `path` is a shard folder (every shard of the split) or one shard file or a brace pattern of
// shard files in such a folder ("OUT/train-{000000..000031}.tar": those shards, in that order; a
// pattern naming only the other split's shards gives the whole of this split). InputError, one
// line, for a missing or foreign manifest or index, an index that does not match the manifest, or
// a shard file of another size than the index says.
std::unique_ptr<ShardSource> open_shard_source(const std::string& path, Split split);

}  // namespace pw::models::data::shards
