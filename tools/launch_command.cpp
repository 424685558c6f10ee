#include "tools/launch_command.h"

#include <algorithm>
#include <cstdio>
#include <iterator>

#include "core/error.h"
#include "rpc/job_token.h"
#include "tools/flag_checks.h"
#include "tools/tls_flags.h"
#include "tools/train_command.h"
#include "train/job_plan.h"
#include "train/launcher/stop_signals.h"
#include "train/launcher/supervisor.h"

namespace pw::tools {

namespace {

// The train flags the parameter servers must agree with (replicas = workers, the update mode and
// table bounds), read with the train command's own parser.
train::JobConfig train_job_of(const std::vector<std::string>& args) {
  PW_INPUT_CHECK(args.front() == "train", "pipewright launch --ps serves the embedding tables of a train job; got '"
                                              << args.front() << "' after --");
  return job_config_of_train_args(args);
}

}  // namespace

void add_launch_command(CLI::App& app, LaunchOptions& o) {
  auto* cmd = app.add_subcommand("launch", "start this node's ranks of a multi-process job: pipewright launch "
                                           "--nproc-per-node N [--nnodes K --node-rank I --master HOST:PORT] "
                                           "[--max-restarts R] -- <train arguments>");
  // Each flag records the LaunchSpec field it sets, so that messages naming fields name flags.
  const auto bind = [cmd, &o](const std::string& flag, const std::string& path, auto& field, const std::string& help) {
    o.flags.add(path, flag);
    return cmd->add_option(flag, field, help);
  };
  bind("--nproc-per-node", "/nproc_per_node", o.nproc_per_node, "ranks on this node")->capture_default_str()
      ->check(range(1, 1024));
  bind("--nnodes", "/nnodes", o.nnodes, "nodes in the job")->capture_default_str()->check(range(1, 65536));
  bind("--node-rank", "/node_rank", o.node_rank, "this node's index, 0 to nnodes-1")->capture_default_str()
      ->check(NonNegative);
  bind("--master", "/master", o.master,
       "HOST:PORT of node 0, where rank 0 serves the rendezvous (default 127.0.0.1 and a free port; "
       "required with --nnodes > 1)");
  bind("--grace", "/grace_seconds", o.grace_seconds,
       "seconds the other ranks get to stop by themselves after one fails, before they are killed")
      ->capture_default_str()->check(range(0.0, 3600.0));
  bind("--max-restarts", "/max_restarts", o.max_restarts,
       "after a rank fails and the others stopped, start every rank again, at most this many times "
       "(each attempt sees PW_RESTART_COUNT and PW_RESTART_CAUSES); with --nnodes > 1 every node restarts "
       "together")
      ->capture_default_str()->check(range(0, 1000000));
  bind("--node-timeout", "/node_timeout_seconds", o.node_timeout_seconds,
       "with --nnodes > 1 and --max-restarts: seconds a launcher waits for the other nodes' launchers "
       "(to join, and to end an attempt)")
      ->capture_default_str()->check(range(1.0, 86400.0));
  bind("--ps", "/servers/count", o.ps, "parameter servers to start (pipewright ps serve, one shard each, on loopback) "
       "for the embedding tables of a --model dlrm job; single-node jobs")
      ->capture_default_str()->check(range(0, 64));
  bind("--ps-dir", "/servers/config/dir", o.ps_dir, "with --ps: the servers keep their shards here (snapshots and logs) and "
       "resume from them");
  add_tls_options(*cmd, o.tls, o.flags);
  o.flags.add("/tls/plain_links", "--plain-links");
  cmd->add_flag("--plain-links", o.tls.plain_links,
                "let ranks on several hosts run without TLS (every rank gets PW_PLAIN_LINKS=1): plain TCP, where "
                "every frame carries the job token in clear (only on a network you trust)");
  o.flags.add("/job_token", rpc::kJobTokenEnv);   // read from the environment by run_launch
  cmd->add_option("command", o.command, "after --: pipewright arguments (-- train --model seed-cnn --stages 4) or any program "
                                    "and its arguments (-- build/bin/example_custom_cnn --steps 50)")
      ->required();
  cmd->callback([&o] { std::exit(run_launch(o)); });
}

int run_launch(const LaunchOptions& o) {
  launcher::LaunchSpec spec;
  spec.nproc_per_node = o.nproc_per_node;
  spec.nnodes = o.nnodes;
  spec.node_rank = o.node_rank;
  spec.grace_seconds = o.grace_seconds;
  spec.max_restarts = o.max_restarts;
  spec.node_timeout_seconds = o.node_timeout_seconds;
  if (auto token = rpc::job_token_from_env()) spec.job_token = *token;
  spec.tls = tls_with_environment(o.tls);
  if (!o.master.empty()) {
    spec.master = rpc::parse_host_port(o.master);
    PW_INPUT_CHECK(spec.master.port > 0, "--master " << o.master << ": give a port other than 0");
  }
  spec.args = o.command;
  static const char* kSubcommands[] = {"train", "plan", "info", "launch"};
  const bool has_subcommand = std::any_of(std::begin(kSubcommands), std::end(kSubcommands),
                                          [&](const char* s) { return spec.args.front() == s; });
  // Any other program: a path (or a name on PATH) that is not a flag, e.g. a user's training
  // program linked against the engine. It reads the same rank environment.
  if (!has_subcommand && !spec.args.front().empty() && spec.args.front()[0] != '-') {
    spec.program = spec.args.front();
    spec.args.erase(spec.args.begin());
    PW_INPUT_CHECK(o.ps == 0, "--ps starts parameter servers for pipewright train jobs; start them with pipewright "
                              "ps serve for '" << spec.program << "' and give it their addresses");
  } else if (!has_subcommand) {
    spec.args.insert(spec.args.begin(), "train");
  }
  PW_INPUT_CHECK(spec.args.front() != "launch", "pipewright launch cannot launch itself; give train arguments after --");
  if (o.ps > 0) {
    const train::JobConfig job = train_job_of(spec.args);
    // The job as its ranks will plan it, servers included: a model with no tables on servers is
    // refused here, in the words `train --ps` uses, before any server starts.
    train::JobConfig with_servers = job;
    with_servers.ps.servers = o.ps;
    try {
      train::plan_job(with_servers);
    } catch (const train::ConfigError& e) {
      if (e.path().rfind("/ps/", 0) != 0) throw;
      throw InputError("--ps: " + e.problem());
    }
    spec.servers.count = o.ps;
    spec.servers.workers = job.replicas.replicas;
    spec.servers.config = job.ps;
    spec.servers.config.dir = o.ps_dir;
  }
  // The launcher library names LaunchSpec fields by their paths; this command's user gave flags.
  launcher::SupervisorHooks hooks;
  hooks.report = [&o](const std::string& line) {
    std::fprintf(stderr, "pipewright launch: %s\n", o.flags.translate(line).c_str());
  };
  try {
    launcher::Supervisor supervisor(spec, hooks);
    launcher::install_stop_signal_handlers();
    return supervisor.run().exit_code;
  } catch (const train::ConfigError& e) {
    throw InputError(o.flags.message_of(e));
  } catch (const InputError& e) {
    throw InputError(o.flags.translate(e.what()));
  }
}

}  // namespace pw::tools
