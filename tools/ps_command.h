#pragma once
// `pipewright ps serve`: one parameter-server shard as its own process.
#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "pipewright/job_config.h"
#include "tools/flag_names.h"

namespace pw::tools {

struct PsServeOptions {
  std::string config;   // a JSON file (train/ps_serve_config.h) instead of the flags below
  std::string bind = "127.0.0.1:0";
  int shard = 0;
  int shards = 1;
  int workers = 1;
  std::string mode = "async";
  std::string dir;
  std::int64_t snapshot_every = 200;
  // Table bounds every table on this server must have (when bounds_given): see ps_bound_flags.h.
  bool bounds_given = false;
  int admit_after = 1;
  std::int64_t max_rows = 0;
  std::int64_t row_ttl = 0;
  train::TlsConfig tls;   // --tls-cert, --tls-key, --tls-ca (or PW_TLS_*): mutual TLS on every connection
  FlagNames flags;        // the /tls/... fields the TLS flags set
};

void add_ps_command(CLI::App& app, PsServeOptions& options);
int run_ps_serve(const PsServeOptions& options);

}  // namespace pw::tools
