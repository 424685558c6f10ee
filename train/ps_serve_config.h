#pragma once
// One parameter-server shard's configuration in its JSON form: what `pipewright launch --ps K`
// writes for each server it starts and `pipewright ps serve --config FILE.json` reads, so that a
// server gets the job's own parameter-server block instead of flags rendered back from it.
//
//   {"bind": "127.0.0.1:41234", "shard": 0, "shards": 2, "workers": 2, "snapshot_every": 200,
//    "ps": {"mode": "sync", "admit_after": 1, "max_rows": 0, "row_ttl": 0, "dir": "ps", ...}}
//
// "ps" holds the fields of train::ParameterServerConfig (JobConfig's "ps"); the server uses its
// update mode, its table bounds (when any is set, every table on it must have them) and its dir
// (the servers' folder: this shard keeps its files in <dir>/shard<shard>, as `train --ps-dir`
// does for servers run as threads). The others are the client's and are ignored here.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "dataparallel/ps/shard.h"
#include "pipewright/job_config.h"

namespace pw::train {

struct PsServeConfig {
  std::string bind = "127.0.0.1:0";   // HOST:PORT to listen on; port 0: any free port
  int shard = 0;                      // 0 to shards-1
  int shards = 1;
  int workers = 1;                    // workers that push every step: the job's replicas
  std::int64_t snapshot_every = 200;  // pushes between snapshots (with a dir)
  ParameterServerConfig ps;
};

nlohmann::json to_json(const PsServeConfig& config);
// InputError naming the field ("/shard: 3, expected 0 to 1") for anything out of range.
PsServeConfig ps_serve_config_from_json(const nlohmann::json& j);
// InputError naming the file when it cannot be read or is not such a config.
PsServeConfig read_ps_serve_config(const std::string& path);
// Writes `config` to `path` (InputError naming the file when it cannot be written).
void write_ps_serve_config(const PsServeConfig& config, const std::string& path);

// The shard's server configuration (InputError for a bad mode or table bound).
dp::PsShardConfig shard_config_of(const PsServeConfig& config);

}  // namespace pw::train
