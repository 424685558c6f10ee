#include "models/data/shards/shard_manifest.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include <nlohmann/json.hpp>

#include "core/durable_file.h"
#include "core/error.h"

namespace pw::models::data::shards {

using nlohmann::json;

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
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  PW_INPUT_CHECK(j.is_object() && j.value("format", std::string()) == kManifestFormat,
                 "'" << path << "' is not a pipewright shard manifest (made by `pipewright data pack`)");
  const int version = j.value("version", 0);
  PW_INPUT_CHECK(version == kManifestVersion, "shard manifest '" << path << "' has format version " << version
                 << "; this pipewright reads version " << kManifestVersion);
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
  std::ifstream in(path);
  PW_INPUT_CHECK(in, "cannot read shard manifest '" << path << "': " << std::strerror(errno)
                 << " (a shard folder made by `pipewright data pack` holds manifest.json)");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return decode_shard_manifest(text, path);
}

}  // namespace pw::models::data::shards
