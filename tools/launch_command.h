#pragma once
// `pipewright launch`: starts one node's ranks of a multi-process job (as torchrun does), forwards
// their output with a rank prefix, and stops them all when one fails; with --max-restarts K it then
// starts them all again, at most K times (with --nnodes > 1 every node's launcher restarts together,
// coordinated through node 0's launcher). This file only maps the flags onto a LaunchSpec; the
// supervisor is the pw_launcher library (train/launcher/supervisor.h).
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "pipewright/job_config.h"
#include "tools/flag_names.h"

namespace pw::tools {

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master;            // host:port of rank 0's rendezvous; default 127.0.0.1 and a free port
  double grace_seconds = 10.0;   // after one rank fails, how long the others get to stop by themselves
  int ps = 0;                    // parameter servers to start on this node for the job's embedding tables
  std::string ps_dir;            // where they keep their shards (shard<i> below it); empty: not kept
  int max_restarts = 0;          // restarts of every local rank after a failure (0: a failure ends the job)
  double node_timeout_seconds = 300.0;   // nnodes > 1 with restarts: how long launchers wait for each other
  train::TlsConfig tls;          // --tls-cert, --tls-key, --tls-ca (or PW_TLS_*): given to every rank and server
  std::vector<std::string> command;   // the pipewright arguments after "--" ("train" may be left out)
  FlagNames flags;                    // the LaunchSpec field each flag sets, filled as the flags are added
};

void add_launch_command(CLI::App& app, LaunchOptions& options);
int run_launch(const LaunchOptions& options);

}  // namespace pw::tools
