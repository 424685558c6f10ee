#include "models/data/shards/shard_source.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <map>
#include <set>
#include <utility>

#include "core/durable_file.h"
#include "core/error.h"
#include "core/input_file.h"
#include "models/data/image_folder_listing.h"
#include "models/data/shards/brace_pattern.h"
#include "models/data/shards/tar_reader.h"

namespace fs = std::filesystem;

namespace pw::models::data::shards {

namespace {

// The checksum of a shard's bytes, read through its descriptor (opened as core/input_file.h opens).
std::string shard_checksum(int fd, const ShardSource::Shard& shard) {
  Checksum64 sum;
  std::vector<unsigned char> buffer(std::size_t{1} << 20);
  std::int64_t at = 0;
  for (;;) {
    const ssize_t n = ::pread(fd, buffer.data(), buffer.size(), static_cast<off_t>(at));
    if (n < 0 && errno == EINTR) continue;
    PW_INPUT_CHECK(n >= 0, "cannot read tar shard '" << shard.path << "': " << std::strerror(errno));
    if (n == 0) break;
    sum.add(buffer.data(), static_cast<std::size_t>(n));
    at += n;
  }
  return sum.hex();
}

}  // namespace

ShardSource::ShardSource(std::string description, ShardManifest manifest, std::vector<Shard> shards,
                         std::vector<IndexedSample> samples)
    : description_(std::move(description)),
      manifest_(std::move(manifest)),
      shards_(std::move(shards)),
      samples_(std::move(samples)),
      fds_(shards_.size(), -1),
      opened_(new std::once_flag[shards_.size()]) {}

ShardSource::~ShardSource() {
  for (int fd : fds_)
    if (fd >= 0) ::close(fd);
}

const IndexedSample& ShardSource::indexed(std::int64_t index) const {
  PW_CHECK(index >= 0 && index < size(), "sample " << index << " of " << size() << " in " << description_);
  return samples_[static_cast<std::size_t>(index)];
}

std::int64_t ShardSource::label(std::int64_t index) const { return indexed(index).label; }

std::string ShardSource::member_name(const IndexedSample& s) const {
  return shards_[s.shard].path + ":" + s.key + "." + s.extension + " (" + s.source + ")";
}

int ShardSource::shard_fd(std::uint32_t shard) const {
  std::call_once(opened_[shard], [&] {
    // A shard replaced by a FIFO or a device since the source was opened is refused, not waited on.
    InputFile file(shards_[shard].path, "tar shard");
    PW_INPUT_CHECK(file.size() == shards_[shard].manifest.bytes, "tar shard '" << shards_[shard].path << "' is " << file.size()
                   << " bytes; the index says " << shards_[shard].manifest.bytes << " (truncated or replaced?)");
    fds_[shard] = file.release();
  });
  return fds_[shard];
}

EncodedSample ShardSource::read(std::int64_t index) const {
  const IndexedSample& s = indexed(index);
  EncodedSample out;
  out.name = member_name(s);
  out.label = s.label;
  out.bytes.resize(static_cast<std::size_t>(s.size));
  const int fd = shard_fd(s.shard);
  std::size_t got = 0;
  while (got < out.bytes.size()) {
    const ssize_t n = ::pread(fd, out.bytes.data() + got, out.bytes.size() - got, static_cast<off_t>(s.offset) + static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    PW_INPUT_CHECK(n >= 0, "cannot read " << out.name << ": " << std::strerror(errno));
    PW_INPUT_CHECK(n > 0, "tar shard '" << shards_[s.shard].path << "' ends before the bytes of " << out.name << " (truncated?)");
    got += static_cast<std::size_t>(n);
  }
  return out;
}

ShardCheck ShardSource::verify() const {
  std::vector<std::vector<const IndexedSample*>> by_shard(shards_.size());
  for (const auto& s : samples_) by_shard[s.shard].push_back(&s);
  ShardCheck check;
  for (std::uint32_t i = 0; i < shards_.size(); ++i) {
    const Shard& shard = shards_[i];
    const std::string sum = shard_checksum(shard_fd(i), shard);
    PW_INPUT_CHECK(sum == shard.manifest.checksum, "tar shard '" << shard.path << "' is damaged: its checksum is " << sum
                   << ", the manifest says " << shard.manifest.checksum);
    std::size_t member = 0;   // members 2k and 2k+1 are sample k's image and .cls
    const auto& expected = by_shard[i];
    for_each_tar_member(shard.path, [&](const TarMember& m) {
      const std::size_t k = member / 2;
      PW_INPUT_CHECK(k < expected.size(), "tar shard '" << shard.path << "' has a member '" << m.name << "' that the index does not list");
      const IndexedSample& s = *expected[k];
      if (member % 2 == 0) {
        PW_INPUT_CHECK(m.name == s.key + "." + s.extension, "tar shard '" << shard.path << "' holds '" << m.name << "' where the index lists '"
                       << s.key << "." << s.extension << "'");
        const EncodedSample direct = read(&s - samples_.data());
        PW_INPUT_CHECK(direct.bytes == m.data, "tar shard '" << shard.path << "': the bytes at the indexed offset of '" << m.name
                       << "' differ from the member's");
      } else {
        PW_INPUT_CHECK(m.name == s.key + ".cls" && std::string(m.data.begin(), m.data.end()) == std::to_string(s.label),
                       "tar shard '" << shard.path << "': member '" << m.name << "' does not hold label " << s.label << " of '" << s.key << "'");
      }
      ++member;
    });
    PW_INPUT_CHECK(member == 2 * expected.size(), "tar shard '" << shard.path << "' holds " << member / 2 << " samples; the index lists "
                   << expected.size());
    ++check.shards;
    check.samples += static_cast<std::int64_t>(expected.size());
    check.bytes += shard.manifest.bytes;
  }
  return check;
}

namespace {

struct Selection {
  fs::path folder;
  std::vector<std::string> files;   // empty: every shard of the split
  std::string description;
};

Selection select(const std::string& path) {
  Selection sel;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    sel.folder = path;
    sel.description = path;
    return sel;
  }
  const std::vector<std::string> paths = has_braces(path) ? expand_braces(path) : std::vector<std::string>{path};
  sel.folder = fs::path(paths.front()).parent_path();
  sel.description = path;
  for (const auto& p : paths) {
    PW_INPUT_CHECK(fs::is_regular_file(p, ec), "tar shard '" << p << "'" << (p != path ? " (from '" + path + "')" : "")
                   << " does not exist; give a shard folder, a shard file or a brace pattern of shard files");
    PW_INPUT_CHECK(fs::path(p).parent_path() == sel.folder, "the shards of '" << path << "' are in more than one folder");
    sel.files.push_back(fs::path(p).filename().string());
  }
  return sel;
}

std::string split_names(const ShardManifest& m) {
  std::string out;
  for (const auto& s : m.splits) out += (out.empty() ? "" : ", ") + s.name;
  return out;
}

}  // namespace

std::unique_ptr<ShardSource> open_shard_source(const std::string& path, Split split) {
  const Selection sel = select(path);
  const std::string manifest_path = (sel.folder / kManifestFile).string();
  ShardManifest manifest = read_shard_manifest(manifest_path);
  const std::string split_name = split_folder_name(split);
  const ManifestSplit* ms = manifest.find(split_name);
  PW_INPUT_CHECK(ms != nullptr, "shard folder '" << sel.folder.string() << "' has no " << split_name << " split (its manifest lists: "
                 << split_names(manifest) << ")");

  std::set<std::string> known;   // every shard of every split
  for (const auto& s : manifest.splits)
    for (const auto& shard : s.shards) known.insert(shard.file);
  std::vector<std::uint32_t> chosen;   // into ms->shards
  for (const auto& file : sel.files) {
    PW_INPUT_CHECK(known.count(file) != 0, "'" << (sel.folder / file).string() << "' is not a shard listed in '" << manifest_path << "'");
    for (std::uint32_t i = 0; i < ms->shards.size(); ++i)
      if (ms->shards[i].file == file && std::find(chosen.begin(), chosen.end(), i) == chosen.end()) chosen.push_back(i);
  }
  if (chosen.empty())
    for (std::uint32_t i = 0; i < ms->shards.size(); ++i) chosen.push_back(i);

  const std::string index_path = (sel.folder / ms->index_file).string();
  std::string index_checksum;
  ShardIndex index = read_shard_index(index_path, &index_checksum);
  PW_INPUT_CHECK(index_checksum == ms->index_checksum, "shard index '" << index_path << "' does not belong to '" << manifest_path
                 << "' (its checksum is " << index_checksum << ", the manifest says " << ms->index_checksum << ")");
  bool same_shards = index.shards.size() == ms->shards.size();
  for (std::size_t i = 0; same_shards && i < ms->shards.size(); ++i)
    same_shards = index.shards[i].file == ms->shards[i].file && index.shards[i].bytes == ms->shards[i].bytes;
  PW_INPUT_CHECK(same_shards && static_cast<std::int64_t>(index.samples.size()) == ms->samples,
                 "shard index '" << index_path << "' lists other shards or samples than '" << manifest_path << "'");

  std::vector<ShardSource::Shard> shards;
  std::map<std::uint32_t, std::uint32_t> renumber;   // index shard -> position in `shards`
  for (std::uint32_t i : chosen) {
    const ManifestShard& m = ms->shards[i];
    const std::string shard_path = (sel.folder / m.file).string();
    // Opened as every data file is (a FIFO or a device in its place is refused in one line).
    const std::int64_t bytes = InputFile(shard_path, "tar shard").size();
    PW_INPUT_CHECK(bytes == m.bytes, "tar shard '" << shard_path << "' is " << bytes
                   << " bytes; the index says " << m.bytes << " (truncated or replaced?)");
    renumber[i] = static_cast<std::uint32_t>(shards.size());
    shards.push_back({shard_path, m});
  }
  const auto classes = static_cast<std::int64_t>(manifest.classes.size());
  std::vector<std::vector<IndexedSample>> by_shard(shards.size());
  for (std::size_t at = 0; at < index.samples.size(); ++at) {
    auto& s = index.samples[at];
    // decode_shard_index holds s.shard to the index's shards (as many as the manifest's) and the
    // fields to [0, 2^63); the sum offset + size is never formed, so it cannot overflow.
    const std::int64_t shard_bytes = ms->shards[s.shard].bytes;
    PW_INPUT_CHECK(s.offset <= shard_bytes && s.size <= shard_bytes - s.offset,
                   "shard index '" << index_path << "' is damaged: sample " << at << " ('" << s.key << "') has offset "
                   << s.offset << " and size " << s.size << ", outside its shard '" << ms->shards[s.shard].file << "' of "
                   << shard_bytes << " bytes");
    PW_INPUT_CHECK(s.size <= kMaxImageFileBytes, "shard index '" << index_path << "': sample " << at << " ('" << s.key
                   << "') has size " << s.size << ", more than the " << kMaxImageFileBytes << " bytes accepted for an image ("
                   << kMaxImageFileLimit << ")");
    PW_INPUT_CHECK(s.label < classes, "shard index '" << index_path << "' is damaged: sample " << at << " ('" << s.key
                   << "') has label " << s.label << "; the manifest lists " << classes << " classes");
    const auto it = renumber.find(s.shard);
    if (it == renumber.end()) continue;
    s.shard = it->second;
    by_shard[it->second].push_back(std::move(s));
  }
  std::vector<IndexedSample> samples;
  for (auto& list : by_shard) std::move(list.begin(), list.end(), std::back_inserter(samples));
  std::string description = "tar shards " + sel.description + " (" + split_name + ")";
  return std::make_unique<ShardSource>(std::move(description), std::move(manifest), std::move(shards), std::move(samples));
}

}  // namespace pw::models::data::shards
