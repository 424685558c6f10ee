#include "models/data/shards/data_summary.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <system_error>

#include "core/error.h"
#include "models/data/shards/brace_pattern.h"
#include "models/data/image_dataset.h"
#include "models/data/image_folder_listing.h"

namespace fs = std::filesystem;

namespace pw::models::data::shards {

ByteStats byte_stats(std::vector<std::int64_t> sizes) {
  ByteStats stats;
  if (sizes.empty()) return stats;
  std::sort(sizes.begin(), sizes.end());
  const auto rank = [&](double p) {   // nearest rank: the smallest value with at least p of the samples at or below it
    const auto n = static_cast<double>(sizes.size());
    const auto r = static_cast<std::size_t>(std::max(1.0, std::ceil(p * n)));
    return sizes[std::min(r, sizes.size()) - 1];
  };
  stats.min = sizes.front();
  stats.median = rank(0.5);
  stats.p90 = rank(0.9);
  stats.max = sizes.back();
  return stats;
}

namespace {

SplitSummary folder_split(const std::string& name, const std::vector<ListedImage>& images, std::size_t classes) {
  SplitSummary s;
  s.name = name;
  s.samples = static_cast<std::int64_t>(images.size());
  s.class_counts.assign(classes, 0);
  std::vector<std::int64_t> sizes;
  for (const auto& image : images) {
    ++s.class_counts[static_cast<std::size_t>(image.label)];
    sizes.push_back(image.bytes);
  }
  s.encoded_bytes = byte_stats(std::move(sizes));
  return s;
}

// The images themselves: their sizes per split, and the decoding speed on the first split.
void survey(const EncodedSource& source, SplitSummary& split, DataSummary& d, const SurveyLimits& limits) {
  split.image_sizes = survey_sizes(source, limits.size_samples, limits.seed);
  if (!d.decode && limits.decode_samples > 0) d.decode = time_decoding(source, limits.decode_samples, limits.seed);
}

DataSummary summarize_image_folder(const std::string& path, const SurveyLimits& limits) {
  const ImageFolderListing listing = list_image_folder(path);
  DataSummary d;
  d.kind = "image folder";
  d.path = path;
  d.classes = listing.classes;
  d.splits.push_back(folder_split("train", listing.train, listing.classes.size()));
  survey(*open_image_folder(path, Split::Train), d.splits.back(), d, limits);
  if (listing.has_val) {
    d.splits.push_back(folder_split("val", listing.val, listing.classes.size()));
    survey(*open_image_folder(path, Split::Test), d.splits.back(), d, limits);
  }
  return d;
}

SplitSummary shard_split(const ShardSource& source, const std::string& name) {
  SplitSummary s;
  s.name = name;
  s.samples = source.size();
  s.class_counts.assign(source.manifest().classes.size(), 0);
  s.shards = static_cast<std::int64_t>(source.shards().size());
  std::vector<std::int64_t> sizes;
  for (std::int64_t i = 0; i < source.size(); ++i) {
    ++s.class_counts[static_cast<std::size_t>(source.label(i))];
    sizes.push_back(source.indexed(i).size);
  }
  s.encoded_bytes = byte_stats(std::move(sizes));
  return s;
}

// The shard file names a file or pattern names; empty for a folder.
std::set<std::string> named_files(const std::string& path) {
  std::set<std::string> names;
  std::error_code ec;
  if (fs::is_directory(path, ec)) return names;
  for (const auto& p : has_braces(path) ? expand_braces(path) : std::vector<std::string>{path})
    names.insert(fs::path(p).filename().string());
  return names;
}

DataSummary summarize_shards(const std::string& path, bool verify, const SurveyLimits& limits) {
  DataSummary d;
  d.kind = "tar shards";
  d.path = path;
  const std::set<std::string> named = named_files(path);
  std::error_code ec;
  const fs::path folder = fs::is_directory(path, ec) ? fs::path(path) : fs::path(expand_braces(path).front()).parent_path();
  const ShardManifest manifest = read_shard_manifest((folder / kManifestFile).string());
  for (const auto& split_entry : manifest.splits) {
    const Split split = split_entry.name == "train" ? Split::Train : Split::Test;
    const auto source = open_shard_source(path, split);
    // A pattern of one split's shards opens the other split whole: report only the split it names.
    const bool is_named = named.empty() || std::any_of(source->shards().begin(), source->shards().end(), [&](const auto& shard) {
      return named.count(fs::path(shard.path).filename().string()) != 0;
    });
    if (!is_named) continue;
    d.classes = manifest.classes;
    d.splits.push_back(shard_split(*source, split_entry.name));
    survey(*source, d.splits.back(), d, limits);
    if (verify) {
      const ShardCheck c = source->verify();
      if (!d.verified) d.verified = ShardCheck{};
      d.verified->shards += c.shards;
      d.verified->samples += c.samples;
      d.verified->bytes += c.bytes;
    }
  }
  return d;
}

}  // namespace

DataSummary summarize_data(const std::string& path, bool verify, const SurveyLimits& limits) {
  // The error_code forms: a link loop (`train -> train`) is then "not there", not an exception.
  std::error_code ec;
  const bool has_manifest = fs::exists(fs::path(path) / kManifestFile, ec);
  if (fs::is_directory(fs::path(path) / "train", ec) && !has_manifest) return summarize_image_folder(path, limits);
  if (has_manifest || has_braces(path) || fs::is_regular_file(path, ec))
    return summarize_shards(path, verify, limits);
  throw InputError("'" + path + "' is neither an image folder (ROOT/train/CLASS/*.jpg) nor a shard folder (with manifest.json)");
}

}  // namespace pw::models::data::shards
