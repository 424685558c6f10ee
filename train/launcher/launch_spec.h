#pragma once
// What a node's launcher is asked to run (pipewright launch fills it from its flags): how many
// ranks here and in the whole job, where rank 0's rendezvous is, how failures are handled, the
// program every rank runs, and the parameter servers to start for the job.
#include <string>
#include <vector>

#include "pipewright/job_config.h"
#include "rpc/host_port.h"

namespace pw::launcher {

// Parameter servers the launcher starts on this node, one shard each on a free loopback port,
// before the first rank; each gets its configuration as JSON (train/ps_serve_config.h) through
// `<program> ps serve --config FILE.json`, and the ranks get their addresses as --ps-servers after their arguments.
struct ServerLaunch {
  int count = 0;                          // 0: none
  int workers = 1;                        // workers that push every step: the job's replicas
  train::ParameterServerConfig config;    // the job's "ps" block; dir: where they keep their shards (empty: not kept)
  std::string program;                    // the pipewright executable; empty: this one
  train::TlsConfig tls;                   // given to each server as PW_TLS_* (LaunchSpec::tls)
};

struct LaunchSpec {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;                      // this node, 0 to nnodes-1: it runs ranks node_rank * nproc_per_node ...
  // Where rank 0 serves the rendezvous (MASTER_ADDR, MASTER_PORT). Port 0 (one node only): a free
  // loopback port, a fresh one for each attempt.
  rpc::HostPort master{"127.0.0.1", 0};
  double grace_seconds = 10.0;            // after one rank fails, how long the others get to stop by themselves
  int max_restarts = 0;                   // restarts of every rank after a failure (0: a failure ends the job)
  double node_timeout_seconds = 300.0;    // nnodes > 1 with restarts: how long launchers wait for each other
  std::string program;                    // a path or a name on PATH; empty: this executable, as `pipewright <args>`
  std::vector<std::string> args;          // the program's arguments
  std::string job_token;                  // PW_JOB_TOKEN of every rank and server; empty (one node only): a fresh one
  // Mutual TLS (rpc/tls.h): every rank and server gets the files as PW_TLS_CERT, PW_TLS_KEY and
  // PW_TLS_CA (absolute paths), and the launchers' own links (nnodes > 1 with restarts) use them.
  train::TlsConfig tls;
  ServerLaunch servers;
};

}  // namespace pw::launcher
