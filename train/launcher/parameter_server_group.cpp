#include "train/launcher/parameter_server_group.h"

#include <signal.h>
#include <stdlib.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "core/error.h"
#include "rpc/job_token.h"
#include "train/launcher/tls_env.h"
#include "train/launcher/loopback.h"
#include "train/parameter_servers.h"
#include "train/ps_serve_config.h"

namespace pw::launcher {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kListenTimeout = std::chrono::seconds(30);
constexpr auto kTermToKill = std::chrono::seconds(3);
constexpr auto kPoll = std::chrono::milliseconds(50);

std::string prefix_of(int shard) { return "[ps " + std::to_string(shard) + "] "; }

std::string make_config_folder() {
  std::string pattern = (std::filesystem::temp_directory_path() / "pipewright-ps-XXXXXX").string();
  PW_CHECK(mkdtemp(pattern.data()) != nullptr, "mkdtemp(" << pattern << "): " << std::strerror(errno));
  return pattern;
}

}  // namespace

ParameterServerGroup::ParameterServerGroup(const ServerLaunch& spec, const std::string& job_token, Say say,
                                           std::mutex& output_mutex)
    : spec_(spec), token_(job_token), say_(std::move(say)), output_mutex_(output_mutex) {
  // The same servers `train --ps` runs as threads: a bad mode or bound fails here, before any starts.
  for (int shard = 0; shard < spec_.count; ++shard) train::ps_shard_config(spec_.config, spec_.workers, shard, spec_.count);
  folder_ = make_config_folder();
  try {
    for (int shard = 0; shard < spec_.count; ++shard) {
      ports_.push_back(free_loopback_port());
      train::PsServeConfig c;
      c.bind = "127.0.0.1:" + std::to_string(ports_.back());
      c.shard = shard;
      c.shards = spec_.count;
      c.workers = spec_.workers;
      c.ps = spec_.config;
      train::write_ps_serve_config(c, folder_ + "/shard" + std::to_string(shard) + ".json");
      servers_.push_back(nullptr);
      start(shard);
      addresses_ += (addresses_.empty() ? "" : ",") + c.bind;
    }
    // The ranks' first pull must find every server listening.
    for (int shard = 0; shard < spec_.count; ++shard) wait_listening(shard);
  } catch (...) {
    servers_.clear();
    std::error_code ignored;
    std::filesystem::remove_all(folder_, ignored);
    throw;
  }
}

ParameterServerGroup::~ParameterServerGroup() {
  servers_.clear();   // each kills what still runs
  std::error_code ignored;
  std::filesystem::remove_all(folder_, ignored);
}

void ParameterServerGroup::start(int shard) {
  ChildCommand command;
  command.program = spec_.program;
  command.args = {"ps", "serve", "--config", folder_ + "/shard" + std::to_string(shard) + ".json"};
  command.env = tls_env(spec_.tls);
  command.env.emplace_back(rpc::kJobTokenEnv, token_);
  servers_[static_cast<std::size_t>(shard)] = std::make_unique<RankProcess>(shard, command, prefix_of(shard), output_mutex_);
}

void ParameterServerGroup::wait_listening(int shard) {
  auto& server = *servers_[static_cast<std::size_t>(shard)];
  const int port = ports_[static_cast<std::size_t>(shard)];
  const auto ready_by = Clock::now() + kListenTimeout;
  while (!accepts_on_loopback(port)) {
    if (server.reap())
      throw InputError("parameter server " + std::to_string(shard) + " " + describe_status(*server.status()) +
                       " before it listened (see its output above)");
    PW_INPUT_CHECK(Clock::now() < ready_by, "parameter server " << shard << " did not listen on 127.0.0.1:" << port
                                                                << " within 30 s");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::vector<const RankProcess*> ParameterServerGroup::reap_ended() {
  std::vector<const RankProcess*> ended;
  for (auto& server : servers_)
    if (!server->status() && server->reap()) ended.push_back(server.get());
  return ended;
}

void ParameterServerGroup::restart_ended() {
  for (int shard = 0; shard < static_cast<int>(servers_.size()); ++shard) {
    auto& server = *servers_[static_cast<std::size_t>(shard)];
    if (!server.status() && !server.reap()) continue;
    say_("parameter server " + std::to_string(shard) + " starts again on 127.0.0.1:" +
         std::to_string(ports_[static_cast<std::size_t>(shard)]) +
         (spec_.config.dir.empty() ? " (empty: no /servers/config/dir)" : " (from its snapshot in " + spec_.config.dir + ")"));
    start(shard);
    wait_listening(shard);
  }
}

void ParameterServerGroup::stop() {
  for (auto& server : servers_)
    if (!server->reap()) server->signal(SIGTERM);
  const auto kill_by = Clock::now() + kTermToKill;
  for (auto& server : servers_) {
    while (!server->reap()) {
      if (Clock::now() > kill_by) server->signal(SIGKILL);
      std::this_thread::sleep_for(kPoll);
    }
    server->finish_output();
  }
}

}  // namespace pw::launcher
