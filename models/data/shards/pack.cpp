#include "models/data/shards/pack.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/durable_file.h"
#include "core/error.h"
#include "core/input_file.h"
#include "models/data/image_folder_listing.h"
#include "models/data/shards/shard_index.h"
#include "models/data/shards/tar_writer.h"

namespace fs = std::filesystem;

namespace pw::models::data::shards {

std::string shard_file_name(const std::string& split, std::int64_t number) {
  char name[64];
  std::snprintf(name, sizeof name, "%s-%06lld.tar", split.c_str(), static_cast<long long>(number));
  return name;
}

std::string index_file_name(const std::string& split) { return "index-" + split + ".bin"; }

namespace {

std::string sample_key(std::int64_t number) {
  char key[32];
  std::snprintf(key, sizeof key, "%09lld", static_cast<long long>(number));
  return key;
}

// Through core/input_file.h: a FIFO or a device put where the listing saw an image is refused
// unread, and so is a file beyond the largest image read.
std::vector<std::uint8_t> read_whole_file(const std::string& path) {
  return read_whole_bytes(path, "image file", kMaxImageFileBytes, kMaxImageFileLimit);
}

// Removes what a failed pack made, so nothing half-made is left and a retry finds OUT as it was.
class UndoOnFailure {
 public:
  UndoOnFailure(fs::path out, bool made_out) : out_(std::move(out)), made_out_(made_out) {}
  ~UndoOnFailure() {
    if (done_) return;
    std::error_code ignored;
    for (const auto& path : made_) fs::remove(path, ignored);
    if (made_out_) fs::remove(out_, ignored);
  }
  void made(const fs::path& path) { made_.push_back(path); }
  void keep() { done_ = true; }

 private:
  fs::path out_;
  bool made_out_;
  std::vector<fs::path> made_;
  bool done_ = false;
};

bool prepare_out(const fs::path& out) {
  std::error_code ec;
  if (fs::exists(out, ec)) {
    PW_INPUT_CHECK(fs::is_directory(out, ec), "'" << out.string() << "' exists and is not a folder; pack into a new or empty folder");
    PW_INPUT_CHECK(fs::is_empty(out, ec), "'" << out.string() << "' is not empty; pack into a new or empty folder (nothing was written)");
    return false;
  }
  fs::create_directories(out, ec);
  PW_INPUT_CHECK(!ec, "cannot make the folder '" << out.string() << "': " << ec.message());
  return true;
}

struct SplitPacker {
  const fs::path& out;
  const PackOptions& options;
  const PackProgressCallback& progress;
  PackProgress& state;
  UndoOnFailure& undo;

  ManifestSplit pack(const std::string& split, const std::vector<ListedImage>& images, std::size_t classes) {
    ManifestSplit result;
    result.name = split;
    result.samples = static_cast<std::int64_t>(images.size());
    result.class_counts.assign(classes, 0);
    ShardIndex index;
    state.split = split;
    std::size_t next = 0;
    std::vector<std::uint8_t> bytes;
    bool have_bytes = false;   // bytes hold images[next], read before a roll-over
    while (next < images.size()) {
      ManifestShard shard;
      shard.file = shard_file_name(split, static_cast<std::int64_t>(result.shards.size()));
      const fs::path path = out / shard.file;
      undo.made(path);
      write_file_durably(path.string(), [&](const WriteBytes& write) {
        TarWriter tar(write);
        for (; next < images.size(); ++next) {
          const ListedImage& image = images[next];
          if (!have_bytes) bytes = read_whole_file(image.path);
          have_bytes = true;
          const std::string key = sample_key(static_cast<std::int64_t>(next));
          const std::string label = std::to_string(image.label);
          const std::int64_t need = TarWriter::member_bytes(static_cast<std::int64_t>(bytes.size())) +
                                    TarWriter::member_bytes(static_cast<std::int64_t>(label.size())) + TarWriter::kEndBytes;
          if (shard.samples > 0 && tar.bytes() + need > options.shard_bytes) break;
          IndexedSample sample;
          sample.shard = static_cast<std::uint32_t>(result.shards.size());
          sample.offset = tar.add(key + "." + image.extension, bytes.data(), bytes.size());
          tar.add(key + ".cls", label.data(), label.size());
          sample.size = static_cast<std::int64_t>(bytes.size());
          sample.label = image.label;
          sample.key = key;
          sample.extension = image.extension;
          sample.source = image.relative;
          index.samples.push_back(std::move(sample));
          ++result.class_counts[static_cast<std::size_t>(image.label)];
          ++shard.samples;
          have_bytes = false;
          ++state.samples_done;
          state.bytes_done += image.bytes;
          if (progress) progress(state);
        }
        tar.close();
        shard.bytes = tar.bytes();
        shard.checksum = tar.checksum();
      });
      index.shards.push_back({shard.file, shard.bytes});
      result.shards.push_back(std::move(shard));
      ++state.shards_done;
      if (progress) progress(state);
    }
    result.index_file = index_file_name(split);
    const std::string encoded = encode_shard_index(index);
    undo.made(out / result.index_file);
    write_file_durably((out / result.index_file).string(), encoded);
    result.index_checksum = shard_index_checksum(encoded);
    return result;
  }
};

}  // namespace

ShardManifest pack_image_folder(const std::string& root, const std::string& out, const PackOptions& options,
                                const PackProgressCallback& progress) {
  PW_INPUT_CHECK(options.shard_bytes > 0, "the shard size must be positive (got " << options.shard_bytes << " bytes)");
  const ImageFolderListing listing = list_image_folder(root);
  const fs::path out_dir(out);
  UndoOnFailure undo(out_dir, prepare_out(out_dir));
  PackProgress state;
  for (const auto* split : {&listing.train, &listing.val}) {
    state.samples_total += static_cast<std::int64_t>(split->size());
    for (const auto& image : *split) state.bytes_total += image.bytes;
  }
  SplitPacker packer{out_dir, options, progress, state, undo};
  ShardManifest manifest;
  manifest.classes = listing.classes;
  manifest.splits.push_back(packer.pack("train", listing.train, listing.classes.size()));
  if (listing.has_val) manifest.splits.push_back(packer.pack("val", listing.val, listing.classes.size()));
  undo.made(out_dir / kManifestFile);
  write_shard_manifest((out_dir / kManifestFile).string(), manifest);
  undo.keep();
  return manifest;
}

}  // namespace pw::models::data::shards
