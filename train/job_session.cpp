#include "train/job_session.h"

#include <exception>
#include <filesystem>

#include <set>

#include "core/error.h"
#include "core/log.h"
#include "rpc/host_port.h"
#include "train/data_feed.h"
#include "train/job_config.h"
#include "train/restart_baseline.h"

namespace pw::train {
namespace {

void make_checkpoint_folder(const JobConfig& c) {
  const auto& dir = c.checkpoints.dir;
  if (dir.empty()) return;
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error || !std::filesystem::is_directory(dir))
    throw ConfigError("/checkpoints/dir", dir + ": cannot create this folder (" + error.message() + ")");
}

std::unique_ptr<World> make_world(const JobPlan& plan, const std::optional<rpc::LaunchEnv>& launch,
                                  rpc::RestartEnv thread_world_restarts, const rpc::Tls& tls) {
  const auto& c = plan.config;
  if (!launch)
    return make_thread_world(plan.shape(), c.transport == TransportKind::Thrift ? ThreadLinks::Thrift : ThreadLinks::InProcess,
                             std::move(thread_world_restarts), tls);
  WorldTimeouts timeouts;
  timeouts.heartbeat = std::chrono::milliseconds(static_cast<std::int64_t>(c.timeouts.heartbeat_seconds * 1000));
  timeouts.startup = std::chrono::milliseconds(static_cast<std::int64_t>(c.timeouts.startup_seconds * 1000));
  rpc::LaunchEnv env = *launch;
  env.plain_links = env.plain_links || c.tls.plain_links;
  return make_process_world(plan.shape(), env, timeouts, tls);
}

// Without TLS every frame carries the job token in clear: a job whose ranks are on more than one
// host would send it over the network, where anyone who reads it can join or forge frames. Such a
// job starts only with TLS, or when /tls/plain_links says plain TCP on a trusted network is wanted.
void refuse_plain_links_across_hosts(const TlsConfig& tls, bool launcher_allows, const std::vector<std::string>& addresses) {
  if (tls.enabled() || tls.plain_links || launcher_allows) return;
  std::set<std::string> hosts;
  for (const auto& address : addresses) hosts.insert(rpc::parse_host_port(address).host);
  if (hosts.size() < 2) return;
  std::string listed;
  for (const auto& h : hosts) listed += (listed.empty() ? "" : ", ") + h;
  throw ConfigError("/tls", "the job's ranks are on " + std::to_string(hosts.size()) + " hosts (" + listed +
                                ") and its links have no TLS, so every frame would carry the job token in clear; "
                                "give /tls/cert, /tls/key and /tls/ca (docs/running_safely.md), or /tls/plain_links "
                                "to run over plain TCP on a network you trust");
}

}  // namespace

JobSession::JobSession(JobPlan plan, std::optional<rpc::LaunchEnv> launch, rpc::RestartEnv thread_world_restarts)
    : plan_(std::make_shared<const JobPlan>(std::move(plan))) {
  check_devices(plan_->config, plan_->shape().world_size());
  make_checkpoint_folder(plan_->config);
  const rpc::Tls links_tls = load_job_tls(plan_->config.tls);
  servers_ = ParameterServers::open(plan_->config, plan_->server_tables, launch.has_value(), links_tls);
  check_restartable(plan_->config, servers_ != nullptr,
                    (launch ? launch->restarts : thread_world_restarts).max_restarts);
  world_ = make_world(*plan_, launch, std::move(thread_world_restarts), links_tls);
  engines_.resize(static_cast<std::size_t>(world_->local_ranks()));
  try {
    const bool launcher_allows_plain = launch && launch->plain_links;
    world_->run([this, launcher_allows_plain](RankLinks& links) {
      refuse_plain_links_across_hosts(plan_->config.tls, launcher_allows_plain, links.addresses());
      engines_[local_index(links.rank())] = std::make_unique<Engine>(plan_, links, servers_.get());
    });
  } catch (...) {
    failed_ = true;
    throw;
  }
}

JobSession::~JobSession() {
  if (!finished_ && !failed_ && std::uncaught_exceptions() == 0) {
    try {
      finish();
    } catch (const std::exception& e) {
      PW_LOG(Warn, "finishing the job: " << e.what());
    }
  }
  // Members go in reverse: the engines (on this thread; their rank threads are idle), the world
  // that joins the rank threads, then the servers.
}

std::size_t JobSession::local_index(int rank) const {
  for (int i = 0; i < world_->local_ranks(); ++i)
    if (world_->local(i).rank() == rank) return static_cast<std::size_t>(i);
  PW_CHECK(false, "rank " << rank << " does not run in this process");
  return 0;
}

Engine& JobSession::engine(int local_index) {
  const auto& engine = engines_.at(static_cast<std::size_t>(local_index));
  PW_CHECK(engine != nullptr, "the job has finished; its engines are gone");
  return *engine;
}

Engine& JobSession::engine_of_rank(int rank) { return engine(static_cast<int>(local_index(rank))); }

void JobSession::run(const std::function<void(Engine&)>& body) {
  PW_CHECK(!finished_, "the job has finished; make a new one");
  for (const auto& engine : engines_) PW_CHECK(engine != nullptr, "the job's engines are gone; make a new one");
  if (failed_) {
    PW_CHECK(plan_->replicas() == 1 && world_->recover(),
             "the job cannot go on after a failed step: "
                 << (world_->kind() == WorldKind::Processes ? "its ranks are processes, and the others stopped"
                                                            : "its replicas' collectives were cancelled")
                 << "; make a new one");
    for (const auto& engine : engines_) engine->after_recovery();
    failed_ = false;
  }
  try {
    world_->run([&](RankLinks& links) { body(*engines_[local_index(links.rank())]); });
  } catch (...) {
    failed_ = true;
    throw;
  }
}

models::EvalResult JobSession::evaluate(const models::data::Dataset& test, std::int64_t batch,
                                        std::int64_t max_batches) {
  const int replicas = plan_->replicas();
  return on_each_rank<models::EvalResult>([&](Engine& engine) {
           FeedShape shape{test.size(), test.sample_shape(),        engine.data_parts(), replicas,
                           engine.replica(), engine.loader_input_dtype(), engine.loader_memory()};
           EvalFeed feed(&test, shape, batch, max_batches);
           return engine.evaluate(feed);
         })
      .front();
}

void JobSession::finish() {
  if (finished_) return;
  run([&](Engine& engine) { engines_[local_index(engine.rank())].reset(); });
  finished_ = true;
  world_->finish();
}

}  // namespace pw::train
