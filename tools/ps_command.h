#pragma once
// `pipewright ps serve`: one parameter-server shard as its own process.
#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

namespace pw::tools {

struct PsServeOptions {
  std::string bind = "127.0.0.1:0";
  int shard = 0;
  int shards = 1;
  int workers = 1;
  std::string mode = "async";
  std::string dir;
  std::int64_t snapshot_every = 200;
};

void add_ps_command(CLI::App& app, PsServeOptions& options);
int run_ps_serve(const PsServeOptions& options);

}  // namespace pw::tools
