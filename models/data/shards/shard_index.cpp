#include "models/data/shards/shard_index.h"

#include <cstring>
#include <limits>
#include <sstream>
#include <utility>

#include "core/durable_file.h"
#include "core/error.h"
#include "core/input_file.h"

namespace pw::models::data::shards {
namespace {

constexpr char kMagic[8] = {'P', 'W', 'T', 'A', 'R', 'I', 'D', 'X'};

// Little-endian fields, whatever the host.
class Encoder {
 public:
  void u8(std::uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u32(std::uint32_t v) {
    for (int i = 0; i < 4; ++i) u8(static_cast<std::uint8_t>(v >> (8 * i)));
  }
  void u64(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) u8(static_cast<std::uint8_t>(v >> (8 * i)));
  }
  void text(const std::string& s) {
    u32(static_cast<std::uint32_t>(s.size()));
    out_ += s;
  }
  void raw(const char* p, std::size_t n) { out_.append(p, n); }
  std::string& bytes() { return out_; }

 private:
  std::string out_;
};

class Decoder {
 public:
  Decoder(const std::string& bytes, std::size_t end, const std::string& path) : bytes_(bytes), end_(end), path_(path) {}
  std::uint8_t u8() {
    need(1);
    return static_cast<std::uint8_t>(bytes_[pos_++]);
  }
  std::uint32_t u32() {
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(u8()) << (8 * i);
    return v;
  }
  std::uint64_t u64() {
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(u8()) << (8 * i);
    return v;
  }
  std::string text() {
    const std::uint32_t n = u32();
    need(n);
    std::string s = bytes_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  bool done() const { return pos_ == end_; }
  std::size_t remaining() const { return end_ - pos_; }

 private:
  void need(std::size_t n) const {
    PW_INPUT_CHECK(n <= end_ - pos_, "shard index '" << path_ << "' ends early; it is damaged");
  }
  const std::string& bytes_;
  std::size_t end_;
  const std::string& path_;
  std::size_t pos_ = 0;
};

std::uint64_t content_checksum(const std::string& bytes, std::size_t end) { return checksum64(bytes.data(), end); }

}  // namespace

std::string encode_shard_index(const ShardIndex& index) {
  Encoder e;
  e.raw(kMagic, sizeof kMagic);
  e.u32(kShardIndexVersion);
  e.u32(static_cast<std::uint32_t>(index.shards.size()));
  e.u64(index.samples.size());
  for (const auto& shard : index.shards) {
    e.text(shard.file);
    e.u64(static_cast<std::uint64_t>(shard.bytes));
  }
  for (const auto& s : index.samples) {
    e.u32(s.shard);
    e.u64(static_cast<std::uint64_t>(s.offset));
    e.u64(static_cast<std::uint64_t>(s.size));
    e.u64(static_cast<std::uint64_t>(s.label));
    e.text(s.key);
    e.text(s.extension);
    e.text(s.source);
  }
  e.u64(content_checksum(e.bytes(), e.bytes().size()));
  return std::move(e.bytes());
}

ShardIndex decode_shard_index(const std::string& bytes, const std::string& path) {
  PW_INPUT_CHECK(bytes.size() >= sizeof kMagic + 16 && std::memcmp(bytes.data(), kMagic, sizeof kMagic) == 0,
                 "'" << path << "' is not a pipewright shard index (made by `pipewright data pack`)");
  const std::size_t end = bytes.size() - 8;
  Decoder tail(bytes, bytes.size(), path);
  std::uint64_t stored = 0;
  for (int i = 0; i < 8; ++i) stored |= static_cast<std::uint64_t>(static_cast<std::uint8_t>(bytes[end + i])) << (8 * i);
  PW_INPUT_CHECK(stored == content_checksum(bytes, end), "shard index '" << path << "' is damaged (its checksum does not match its contents)");
  Decoder d(bytes, end, path);
  for (std::size_t i = 0; i < sizeof kMagic; ++i) d.u8();
  const std::uint32_t version = d.u32();
  PW_INPUT_CHECK(version == kShardIndexVersion, "shard index '" << path << "' has format version " << version
                 << "; this pipewright reads version " << kShardIndexVersion);
  // Counts are held to what the bytes left can encode before anything is sized by them: a shard
  // takes at least 12 bytes (its name's length and its size), a sample at least 40 (shard, offset,
  // size, label and three lengths). A count beyond that is damage, not a reason to allocate.
  constexpr std::size_t kMinShardBytes = 4 + 8;
  constexpr std::size_t kMinSampleBytes = 4 + 8 + 8 + 8 + 4 + 4 + 4;
  ShardIndex index;
  const std::uint32_t shards = d.u32();
  const std::uint64_t samples = d.u64();
  PW_INPUT_CHECK(shards <= d.remaining() / kMinShardBytes,
                 "shard index '" << path << "' is damaged: its shard count is " << shards << ", more than its "
                                 << d.remaining() << " remaining bytes can list (at least " << kMinShardBytes << " a shard)");
  index.shards.resize(shards);
  for (auto& shard : index.shards) {
    shard.file = d.text();
    const std::uint64_t bytes = d.u64();
    PW_INPUT_CHECK(bytes <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()),
                   "shard index '" << path << "' is damaged: shard '" << shard.file << "' has size " << bytes
                                   << "; expected a size a file can have");
    shard.bytes = static_cast<std::int64_t>(bytes);
  }
  PW_INPUT_CHECK(samples <= d.remaining() / kMinSampleBytes,
                 "shard index '" << path << "' is damaged: its sample count is " << samples << ", more than its "
                                 << d.remaining() << " remaining bytes can list (at least " << kMinSampleBytes << " a sample)");
  index.samples.resize(samples);
  std::size_t at = 0;
  for (auto& s : index.samples) {
    s.shard = d.u32();
    const std::uint64_t offset = d.u64();
    const std::uint64_t size = d.u64();
    const std::uint64_t label = d.u64();
    s.key = d.text();
    s.extension = d.text();
    s.source = d.text();
    // Fields are read as unsigned: a value beyond int64 would turn negative; it is named here.
    for (const auto& [field, value] : {std::pair<const char*, std::uint64_t>{"offset", offset}, {"size", size}, {"label", label}})
      PW_INPUT_CHECK(value <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()),
                     "shard index '" << path << "' is damaged: sample " << at << " ('" << s.key << "') has " << field << " "
                                     << value << "; expected a value below 2^63");
    PW_INPUT_CHECK(s.shard < index.shards.size(), "shard index '" << path << "' is damaged: sample " << at << " ('" << s.key
                   << "') names shard " << s.shard << "; the index lists " << index.shards.size() << " shards");
    s.offset = static_cast<std::int64_t>(offset);
    s.size = static_cast<std::int64_t>(size);
    s.label = static_cast<std::int64_t>(label);
    ++at;
  }
  PW_INPUT_CHECK(d.done(), "shard index '" << path << "' is damaged (bytes after its last sample)");
  return index;
}

std::string shard_index_checksum(const std::string& encoded) {
  PW_CHECK(encoded.size() >= 8);
  return checksum_hex(checksum64(encoded.data(), encoded.size() - 8));
}

void write_shard_index(const std::string& path, const ShardIndex& index) { write_file_durably(path, encode_shard_index(index)); }

ShardIndex read_shard_index(const std::string& path, std::string* checksum) {
  // A FIFO or a device is refused unread; a file without the index's magic is refused after its
  // first 8 bytes, so a large foreign file (a sparse 6 GB one) is never read whole.
  const InputFile file(path, "shard index");
  char magic[sizeof kMagic] = {};
  PW_INPUT_CHECK(file.read_some_at(magic, sizeof magic, 0) == sizeof magic && std::memcmp(magic, kMagic, sizeof kMagic) == 0,
                 "'" << path << "' is not a pipewright shard index (made by `pipewright data pack`)");
  const std::string bytes = file.read_all(kMaxShardIndexBytes, "about 100 million samples");
  ShardIndex index = decode_shard_index(bytes, path);
  if (checksum != nullptr) *checksum = shard_index_checksum(bytes);
  return index;
}

}  // namespace pw::models::data::shards
