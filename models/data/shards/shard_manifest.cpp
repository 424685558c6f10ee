#include "models/data/shards/shard_manifest.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <nlohmann/json.hpp>

#include "core/durable_file.h"
#include "core/error.h"
#include "core/json_text.h"
#include "core/input_file.h"

namespace pw::models::data::shards {

using nlohmann::json;

namespace {

// A manifest names files inside its own folder: plain names, never a path ("../x", "/dev/zero").
void check_file_name(const std::string& name, const std::string& path, const std::string& field) {
  PW_INPUT_CHECK(!name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
                     name.find('\0') == std::string::npos,
                 "shard manifest '" << path << "' is damaged: " << field << " is '" << name
                                    << "'; expected the name of a file in the manifest's folder");
}

void check_count(std::int64_t value, const std::string& path, const std::string& field) {
  PW_INPUT_CHECK(value >= 0, "shard manifest '" << path << "' is damaged: " << field << " is " << value
                                                 << "; expected 0 or more");
}

}  // namespace

const ManifestSplit* ShardManifest::find(const std::string& split_name) const {
  for (const auto& split : splits)
    if (split.name == split_name) return &split;
  return nullptr;
}

std::string split_folder_name(Split split) { return split == Split::Train ? "train" : "val"; }

std::string encode_shard_manifest(const ShardManifest& manifest) {
  json splits = json::object();
  for (const auto& split : manifest.splits) {
    json shards = json::array();
    for (const auto& s : split.shards)
      shards.push_back({{"file", s.file}, {"bytes", s.bytes}, {"samples", s.samples}, {"checksum", s.checksum}});
    splits[split.name] = {{"samples", split.samples},     {"class_counts", split.class_counts},
                          {"index", split.index_file},    {"index_checksum", split.index_checksum},
                          {"shards", std::move(shards)}};
  }
  const json j = {{"format", kManifestFormat}, {"version", kManifestVersion}, {"classes", manifest.classes},
                  {"splits", std::move(splits)}};
  return j.dump(2) + "\n";
}

ShardManifest decode_shard_manifest(const std::string& text, const std::string& path) {
  check_json_depth(text, "shard manifest '" + path + "'");   // dump() and copies below recurse
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  const auto* format = j.is_object() && j.contains("format") ? j["format"].get_ptr<const json::string_t*>() : nullptr;
  PW_INPUT_CHECK(format != nullptr && *format == kManifestFormat,
                 "'" << path << "' is not a pipewright shard manifest (made by `pipewright data pack`)");
  const json version = j.value("version", json());
  PW_INPUT_CHECK(version.is_number_integer() && version.get<std::int64_t>() == kManifestVersion,
                 "shard manifest '" << path << "' has format version "
                                    << (version.is_primitive() ? version.dump().substr(0, 40) : std::string("a list or object"))
                                    << "; this pipewright reads version "
                                    << kManifestVersion);
  try {
    ShardManifest m;
    m.classes = j.at("classes").get<std::vector<std::string>>();
    for (const auto& [name, s] : j.at("splits").items()) {
      ManifestSplit split;
      split.name = name;
      split.samples = s.at("samples").get<std::int64_t>();
      split.class_counts = s.at("class_counts").get<std::vector<std::int64_t>>();
      split.index_file = s.at("index").get<std::string>();
      split.index_checksum = s.at("index_checksum").get<std::string>();
      for (const auto& shard : s.at("shards"))
        split.shards.push_back({shard.at("file").get<std::string>(), shard.at("bytes").get<std::int64_t>(),
                                shard.at("samples").get<std::int64_t>(), shard.at("checksum").get<std::string>()});
      const std::string where = "split '" + name + "'";
      check_count(split.samples, path, where + " samples");
      check_file_name(split.index_file, path, where + " index");
      for (std::size_t c = 0; c < split.class_counts.size(); ++c)
        check_count(split.class_counts[c], path, where + " class_counts[" + std::to_string(c) + "]");
      for (const auto& shard : split.shards) {
        check_file_name(shard.file, path, where + " shard file");
        check_count(shard.bytes, path, where + " shard '" + shard.file + "' bytes");
        check_count(shard.samples, path, where + " shard '" + shard.file + "' samples");
      }
      m.splits.push_back(std::move(split));
    }
    return m;
  } catch (const json::exception& e) {
    throw InputError("shard manifest '" + path + "' is damaged: " + e.what());
  }
}

void write_shard_manifest(const std::string& path, const ShardManifest& manifest) {
  write_file_durably(path, encode_shard_manifest(manifest));
}

ShardManifest read_shard_manifest(const std::string& path) {
  std::error_code ec;
  PW_INPUT_CHECK(std::filesystem::exists(path, ec), "cannot read shard manifest '" << path << "': " << std::strerror(ENOENT)
                 << " (a shard folder made by `pipewright data pack` holds manifest.json)");
  // A FIFO or a device is refused unread, and so is a file larger than any manifest (a sparse 6 GB
  // file is never read).
  const std::string text = read_whole(path, "shard manifest", kMaxManifestBytes, "a manifest lists about 100 bytes a shard");
  return decode_shard_manifest(text, path);
}

}  // namespace pw::models::data::shards
