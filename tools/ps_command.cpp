#include "tools/ps_command.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <thread>

#include "core/error.h"
#include "dataparallel/ps/server.h"
#include "rpc/host_port.h"
#include "rpc/job_token.h"
#include "tools/flag_checks.h"
#include "tools/ps_bound_flags.h"
#include "tools/tls_flags.h"
#include "train/job_config.h"
#include "train/ps_serve_config.h"

namespace pw::tools {

namespace {
std::atomic<int> g_stop{0};
extern "C" void request_stop(int sig) { g_stop.store(sig); }
}  // namespace

void add_ps_command(CLI::App& app, PsServeOptions& o) {
  auto* ps = app.add_subcommand("ps", "parameter servers for embedding tables");
  ps->require_subcommand(1);
  auto* serve = ps->add_subcommand("serve", "serve one shard until SIGINT or SIGTERM (the job token comes from "
                                            "PW_JOB_TOKEN)");
  auto* config = serve->add_option("--config", o.config,
                                   "FILE.json: this shard's whole configuration (bind, shard, shards, workers, "
                                   "snapshot_every and the job's \"ps\" block), as pipewright launch --ps writes it");
  serve->add_option("--bind", o.bind, "HOST:PORT to listen on (port 0: any free port, printed)")->capture_default_str();
  serve->add_option("--shard", o.shard, "this server's shard, 0 to shards-1")->capture_default_str()
      ->check(NonNegative);
  serve->add_option("--shards", o.shards, "servers in the job")->capture_default_str()->check(Positive);
  serve->add_option("--workers", o.workers, "workers that push every step")->capture_default_str()
      ->check(Positive);
  serve->add_option("--mode", o.mode, "sync, async or bounded")->capture_default_str();
  serve->add_option("--dir", o.dir, "keep the shard here (snapshots and a write-ahead log) and resume from it");
  serve->add_option("--snapshot-every", o.snapshot_every, "pushes between snapshots")->capture_default_str()
      ->check(Positive);
  add_table_bound_options(*serve, o.admit_after, o.max_rows, o.row_ttl, "--");
  add_tls_options(*serve, o.tls, o.flags);
  for (const char* flag : {"--bind", "--shard", "--shards", "--workers", "--mode", "--dir", "--snapshot-every",
                           "--admit-after", "--max-rows", "--row-ttl"})
    config->excludes(serve->get_option(flag));
  serve->callback([&o, serve] {
    o.bounds_given = table_bounds_given(*serve, "--");
    std::exit(run_ps_serve(o));
  });
}

int run_ps_serve(const PsServeOptions& o) {
  const auto token = rpc::job_token_from_env();
  PW_INPUT_CHECK(token.has_value(), "pipewright ps serve needs the job's token in " << rpc::kJobTokenEnv);
  dp::PsShardConfig c;
  std::string bind = o.bind;
  if (!o.config.empty()) {
    const train::PsServeConfig file = train::read_ps_serve_config(o.config);
    c = train::shard_config_of(file);
    bind = file.bind;
  } else {
    c.shard = o.shard;
    c.shards = o.shards;
    c.workers = o.workers;
    try {
      c.mode = dp::parse_update_mode(o.mode);
    } catch (const InputError& e) {
      throw InputError(std::string("--mode: ") + e.what());
    }
    c.dir = o.dir;
    c.snapshot_every = o.snapshot_every;
    if (o.bounds_given) c.bounds = dp::TableBounds{o.admit_after, o.max_rows, o.row_ttl};
  }
  rpc::Tls tls;
  try {
    tls = train::load_job_tls(tls_with_environment(o.tls));
  } catch (const train::ConfigError& e) {
    throw InputError(o.flags.message_of(e));
  }
  std::signal(SIGINT, request_stop);
  std::signal(SIGTERM, request_stop);
  rpc::HostPort address;
  try {
    address = rpc::parse_host_port(bind);
  } catch (const InputError& e) {
    throw InputError((o.config.empty() ? std::string("--bind: ") : "--config " + o.config + ": bind: ") + e.what());
  }
  dp::PsServer server(address, c, *token, rpc::GateLimits{}, tls);
  std::printf("parameter server shard %d of %d listening on %s (mode %s, %d workers%s%s%s%s%s)\n", c.shard, c.shards,
              server.address().str().c_str(), dp::update_mode_name(c.mode), c.workers, tls ? ", mutual TLS" : "",
              c.dir.empty() ? "" : ", dir ",
              c.dir.c_str(), c.bounds ? ", tables: " : "", c.bounds ? dp::describe_bounds(*c.bounds).c_str() : "");
  std::fflush(stdout);
  while (g_stop.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::printf("parameter server shard %d: stopping (signal %d)\n", c.shard, g_stop.load());
  return 0;   // the server and its last snapshot go with `server`
}

}  // namespace pw::tools
