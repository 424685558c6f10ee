#pragma once
// One node's launcher as a library (what `pipewright launch` runs, as torch's elastic agent runs
// under torchrun): starts the node's ranks of a job, each in its own process group with the rank
// environment (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR,
// MASTER_PORT, PW_JOB_TOKEN, PW_RESTART_COUNT, PW_RESTART_CAUSES, PW_MAX_RESTARTS, and
// --ps-servers when it runs parameter servers), forwards their output with a "[rank N] " prefix,
// and when one fails stops the others (a grace period, then SIGTERM, then SIGKILL of their groups).
// With max_restarts K it then starts every rank again, at most K times; with nnodes > 1 every
// node's launcher restarts together, coordinated by node 0's launcher (node_agent.h).
//
// Stopping: a SIGINT/SIGTERM to the launcher stops every rank and ends the job with 128 + the
// signal. The supervisor asks SupervisorHooks::take_stop_request for one; its default reads the
// handlers of install_stop_signal_handlers() (stop_signals.h), which the program installs itself.
//
// Process-wide effects while run() runs: SIGPIPE is ignored, and the process becomes the
// subreaper of what its ranks leave behind (so that a rank's whole group can be waited for).
// Messages name `pipewright launch`'s flags (--max-restarts, --node-timeout, ...): it is the one
// front end of this library.
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "train/launcher/launch_spec.h"
#include "train/launcher/restart_policy.h"

namespace pw::launcher {

class NodeAgent;
class ParameterServerGroup;
class RankProcess;

struct SupervisorHooks {
  // What the launcher says about the job, one line at a time ("rank 1 (pid 42) exited with status 3").
  // Default: stderr, after "pipewright launch: ".
  std::function<void(const std::string&)> report;
  // A stop request (a signal number), taken (each is seen once); 0 when there is none.
  // Default: take_stop_signal().
  std::function<int()> take_stop_request;
};

struct LaunchResult {
  int exit_code = 0;   // 0; the failed rank's status (128 + signal when killed); 128 + a stop request's signal; or 1
  int restarts = 0;    // attempts after the first
  std::string cause;   // empty on success; else one line naming the rank, server or launcher that ended the job
};

class Supervisor {
 public:
  // Checks `spec`: a ConfigError naming the field by its path ("/nnodes") and what is accepted, or
  // an InputError for a program that cannot be started. Starts nothing.
  explicit Supervisor(LaunchSpec spec, SupervisorHooks hooks = {});
  ~Supervisor();   // whatever still runs (after an exception) is killed and waited for
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Runs the job to its end. Throws InputError for what only shows once started (a parameter
  // server that does not listen, nodes given different max_restarts); a failed job is a result.
  LaunchResult run();

 private:
  LaunchResult run_attempts();
  void start_ranks(int attempt, const std::vector<std::string>& causes);
  Outcome watch(int attempt);
  void stop_servers();
  void say(const std::string& line);
  std::string rank_range() const;

  LaunchSpec spec_;
  SupervisorHooks hooks_;
  enum class MasterPort { kGiven, kFreshEachAttempt } master_port_ = MasterPort::kGiven;
  std::mutex output_mutex_;
  std::vector<std::unique_ptr<RankProcess>> ranks_;
  std::unique_ptr<ParameterServerGroup> servers_;
  std::unique_ptr<NodeAgent> agent_;
};

}  // namespace pw::launcher
