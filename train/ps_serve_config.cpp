#include "train/ps_serve_config.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/input_file.h"
#include "core/durable_file.h"
#include "core/error.h"
#include "core/json_text.h"
#include "train/job_config.h"
#include "train/parameter_servers.h"

namespace pw::train {

nlohmann::json to_json(const PsServeConfig& c) {
  return {{"bind", c.bind},       {"shard", c.shard},
          {"shards", c.shards},   {"workers", c.workers},
          {"snapshot_every", c.snapshot_every}, {"ps", ps_config_to_json(c.ps)}};
}

PsServeConfig ps_serve_config_from_json(const nlohmann::json& j) {
  PW_INPUT_CHECK(j.is_object(), "a parameter-server config is a JSON object; got " << j.type_name());
  PsServeConfig c;
  try {
    if (j.contains("bind")) c.bind = j.at("bind").get<std::string>();
    if (j.contains("shard")) c.shard = j.at("shard").get<int>();
    if (j.contains("shards")) c.shards = j.at("shards").get<int>();
    if (j.contains("workers")) c.workers = j.at("workers").get<int>();
    if (j.contains("snapshot_every")) c.snapshot_every = j.at("snapshot_every").get<std::int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw InputError(std::string("parameter-server config: ") + e.what());
  }
  if (j.contains("ps")) c.ps = ps_config_from_json(j.at("ps"));
  PW_INPUT_CHECK(c.shards >= 1, "/shards: " << c.shards << ", expected 1 or more");
  PW_INPUT_CHECK(c.shard >= 0 && c.shard < c.shards,
                 "/shard: " << c.shard << ", expected 0 to " << c.shards - 1 << " (/shards is " << c.shards << ")");
  PW_INPUT_CHECK(c.workers >= 1, "/workers: " << c.workers << ", expected 1 or more");
  PW_INPUT_CHECK(c.snapshot_every >= 1, "/snapshot_every: " << c.snapshot_every << ", expected 1 or more pushes");
  return c;
}

PsServeConfig read_ps_serve_config(const std::string& path) {
  const std::string text = read_whole(path, "parameter-server config", std::int64_t{16} << 20);   // plain, not blocking
  nlohmann::json j;
  try {
    check_json_depth(text, "parameter-server config " + path);   // before parsing (core/json_text.h)
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw InputError("parameter-server config " + path + " is not JSON: " + e.what());
  }
  try {
    return ps_serve_config_from_json(j);
  } catch (const InputError& e) {
    throw InputError("parameter-server config " + path + ": " + e.what());
  }
}

void write_ps_serve_config(const PsServeConfig& c, const std::string& path) {
  try {
    write_file_durably(path, to_json(c).dump(2) + "\n");
  } catch (const InputError& e) {
    throw InputError(std::string("cannot write the parameter-server config: ") + e.what());
  }
}

dp::PsShardConfig shard_config_of(const PsServeConfig& c) {
  dp::PsShardConfig shard = ps_shard_config(c.ps, c.workers, c.shard, c.shards);
  if (!c.ps.dir.empty()) shard.dir = (std::filesystem::path(c.ps.dir) / ("shard" + std::to_string(c.shard))).string();
  shard.snapshot_every = c.snapshot_every;
  return shard;
}

}  // namespace pw::train
