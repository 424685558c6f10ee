#include "rpc/rendezvous_server.h"

#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include <thrift/transport/TSocket.h>

#include "pw_thrift/Rendezvous.h"
#include "rpc/connection_gate.h"
#include "rpc/frame_check.h"
#include "rpc/job_token.h"
#include "rpc/thrift_server.h"

namespace pw::rpc {

namespace {

constexpr std::size_t kMaxRendezvousMessage = 16u << 20;   // store values (NCCL ids, splits) are small
constexpr auto kMonitorPeriod = std::chrono::milliseconds(100);

[[noreturn]] void refuse(const std::string& reason, wire::RendezvousError::type code) {
  wire::RendezvousFailed failed;
  failed.reason = reason;
  failed.code = code;
  throw failed;
}

}  // namespace

// Everything the service knows about the job; shared by the per-connection handlers.
class RendezvousState {
 public:
  explicit RendezvousState(RendezvousConfig config)
      : config_(std::move(config)),
        addresses_(static_cast<std::size_t>(config_.world_size)),
        last_beat_(static_cast<std::size_t>(config_.world_size)),
        beating_(static_cast<std::size_t>(config_.world_size), false),
        left_(static_cast<std::size_t>(config_.world_size), false),
        informed_(static_cast<std::size_t>(config_.world_size), false),
        monitor_([this] { monitor(); }) {}

  ~RendezvousState() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    monitor_.join();
  }

  void check_token(const std::string& token) const {
    if (!tokens_equal(token, config_.job_token)) {
      rpc::note_wrong_token();   // rate-limited per host (rpc/connection_gate.h)
      refuse("wrong job token", wire::RendezvousError::WRONG_TOKEN);
    }
    mark_connection_proven();
  }
  bool token_is_right(const std::string& token) const { return tokens_equal(token, config_.job_token); }

  // A registration with a wrong token: named at once in the log and again when registration
  // times out. It does not stop the job, so that whoever can reach the port cannot end it.
  void note_wrong_token(int rank, const std::string& peer_host) {
    if (rank < 0 || rank >= config_.world_size) return;
    std::lock_guard lock(mutex_);
    // Once per rank and host: every new connection has a new port, and whoever can reach the
    // port must not be able to fill rank 0's log.
    auto& note = wrong_token_[rank];
    if (note == peer_host) return;
    note = peer_host;
    PW_LOG(Warn, "rendezvous: a connection from " << peer_host << " claiming rank " << rank
                                                  << " presented a wrong job token; rank " << rank
                                                  << " stays unregistered until it starts with this job's token");
  }
  void check_rank(int rank) const {
    if (rank < 0 || rank >= config_.world_size)
      refuse("rank " + std::to_string(rank) + " outside a world of " + std::to_string(config_.world_size),
             wire::RendezvousError::REFUSED);
  }

  wire::JobLayout register_rank(int rank, const std::string& address, int timeout_ms) {
    check_rank(rank);
    parse_host_port(address);   // InputError: turned into REFUSED by the handler
    std::unique_lock lock(mutex_);
    auto& slot = addresses_[static_cast<std::size_t>(rank)];
    if (!slot.empty() && slot != address)
      refuse("rank " + std::to_string(rank) + " registered twice (at " + slot + " and " + address +
                 "); every rank of the job needs its own RANK",
             wire::RendezvousError::REFUSED);
    if (slot.empty()) ++registered_;
    slot = address;
    changed_.notify_all();
    wait(lock, timeout_ms, [&] { return registered_ == config_.world_size; },
         [&] {
           std::string text =
               "registration: " + missing_ranks([&](int r) { return addresses_[r].empty(); }) + " not registered";
           for (const auto& [r, peer] : wrong_token_)
             if (addresses_[static_cast<std::size_t>(r)].empty())
               text += "; rank " + std::to_string(r) + " tried from " + peer + " with a wrong job token";
           return text;
         });
    wire::JobLayout layout;
    layout.world_size = config_.world_size;
    layout.pipeline_stages = config_.pipeline_stages;
    layout.replicas = config_.world_size / config_.pipeline_stages;
    for (int r = 0; r < config_.world_size; ++r) {
      wire::RankPlacement p;
      p.rank = r;
      p.stage = r % config_.pipeline_stages;
      p.replica = r / config_.pipeline_stages;
      p.address = addresses_[static_cast<std::size_t>(r)];
      layout.ranks.push_back(p);
    }
    return layout;
  }

  void set(const std::string& key, const std::string& value) {
    {
      std::lock_guard lock(mutex_);
      store_[key] = value;
    }
    changed_.notify_all();
  }

  std::string get(const std::string& key, int timeout_ms) {
    std::unique_lock lock(mutex_);
    wait(lock, timeout_ms, [&] { return store_.count(key) > 0; }, [&] { return "store key '" + key + "'"; });
    return store_.at(key);
  }

  void barrier(const std::string& name, int rank, int timeout_ms) {
    check_rank(rank);
    std::unique_lock lock(mutex_);
    auto& reached = barriers_[name];
    reached.insert(rank);
    changed_.notify_all();
    wait(lock, timeout_ms, [&] { return static_cast<int>(barriers_[name].size()) == config_.world_size; },
         [&] {
           const auto& in = barriers_[name];
           return "barrier '" + name + "': " + missing_ranks([&](int r) { return in.count(r) == 0; }) + " not there";
         });
  }

  std::string heartbeat(int rank) {
    check_rank(rank);
    std::lock_guard lock(mutex_);
    const auto r = static_cast<std::size_t>(rank);
    last_beat_[r] = Clock::now();
    beating_[r] = true;
    if (!failure_.empty()) {
      informed_[r] = true;
      changed_.notify_all();
    }
    return failure_;
  }

  void report_failure(int rank, const std::string& reason) {
    check_rank(rank);
    fail(describe(rank) + " failed: " + reason);
  }

  void leave(int rank) {
    check_rank(rank);
    {
      std::lock_guard lock(mutex_);
      left_[static_cast<std::size_t>(rank)] = true;
    }
    changed_.notify_all();
  }

  void heartbeat_connection_closed(int rank) {
    std::unique_lock lock(mutex_);
    if (stopping_ || left_[static_cast<std::size_t>(rank)]) return;
    lock.unlock();
    fail(describe(rank) + " was lost: its connection to the rendezvous closed (the process exited or was killed)");
  }

  bool wait_until_all_left(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    const auto settled = [&] {
      for (int r = 0; r < config_.world_size; ++r) {
        const auto u = static_cast<std::size_t>(r);
        const bool gone = left_[u] || addresses_[u].empty() || (!failure_.empty() && (informed_[u] || !beating_[u]));
        if (!gone) return false;
      }
      return true;
    };
    changed_.wait_for(lock, timeout, settled);
    for (int r = 0; r < config_.world_size; ++r)
      if (!left_[static_cast<std::size_t>(r)]) return false;
    return true;
  }

  std::string failure() const {
    std::lock_guard lock(mutex_);
    return failure_;
  }

  void stop() {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    changed_.notify_all();
  }

 private:
  std::string describe(int rank) const {
    std::ostringstream out;
    out << "rank " << rank << " (stage " << rank % config_.pipeline_stages;
    if (config_.world_size > config_.pipeline_stages) out << ", replica " << rank / config_.pipeline_stages;
    out << ")";
    return out.str();
  }

  template <typename Missing>
  std::string missing_ranks(Missing missing) const {
    std::ostringstream out;
    int count = 0;
    for (int r = 0; r < config_.world_size; ++r)
      if (missing(r)) out << (count++ ? ", " : "") << r;
    return (count == 1 ? "rank " : "ranks ") + out.str();
  }

  void fail(const std::string& reason) {
    {
      std::lock_guard lock(mutex_);
      if (!failure_.empty() || stopping_) return;
      failure_ = reason;
    }
    PW_LOG(Warn, "rendezvous: job failed: " << reason);
    changed_.notify_all();
  }

  // Waits for `ready` under `lock`; throws RendezvousFailed when the job fails or time runs out.
  template <typename Ready, typename What>
  void wait(std::unique_lock<std::mutex>& lock, int timeout_ms, Ready ready, What what) {
    const auto deadline = Clock::now() + std::chrono::milliseconds(std::max(timeout_ms, 0));
    while (!ready()) {
      if (!failure_.empty()) refuse(failure_, wire::RendezvousError::JOB_FAILED);
      if (stopping_) refuse("the rendezvous service is shutting down", wire::RendezvousError::JOB_FAILED);
      if (changed_.wait_until(lock, deadline) == std::cv_status::timeout && !ready()) {
        if (!failure_.empty()) refuse(failure_, wire::RendezvousError::JOB_FAILED);
        refuse("timed out after " + std::to_string(timeout_ms) + " ms waiting for " + what(),
               wire::RendezvousError::TIMED_OUT);
      }
    }
  }

  void monitor() {
    std::unique_lock lock(mutex_);
    while (!stopping_) {
      changed_.wait_for(lock, kMonitorPeriod);
      if (stopping_ || !failure_.empty()) continue;
      const auto now = Clock::now();
      for (int r = 0; r < config_.world_size; ++r) {
        const auto u = static_cast<std::size_t>(r);
        if (!beating_[u] || left_[u]) continue;
        const auto silent = now - last_beat_[u];
        if (silent > config_.heartbeat_timeout) {
          std::ostringstream reason;
          reason << describe(r) << " stopped answering: no heartbeat for "
                 << std::chrono::duration<double>(silent).count() << " s";
          lock.unlock();
          fail(reason.str());
          lock.lock();
          break;
        }
      }
    }
  }

  const RendezvousConfig config_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::string> addresses_;
  int registered_ = 0;
  std::map<std::string, std::string> store_;
  std::map<std::string, std::set<int>> barriers_;
  std::map<int, std::string> wrong_token_;   // rank -> the host a wrong token came from
  std::vector<Clock::time_point> last_beat_;
  std::vector<bool> beating_, left_, informed_;
  std::string failure_;
  bool stopping_ = false;
  std::thread monitor_;   // last: starts once everything above exists
};

namespace {

// One per connection: remembers which rank sends heartbeats on it, so that the connection
// closing (the rank's process died) fails the job at once.
class RendezvousHandler : public wire::RendezvousIf {
 public:
  RendezvousHandler(std::shared_ptr<RendezvousState> state, std::string peer)
      : state_(std::move(state)), peer_(std::move(peer)) {}
  ~RendezvousHandler() override {
    if (heartbeat_rank_ >= 0) state_->heartbeat_connection_closed(heartbeat_rank_);
  }

  void register_rank(wire::JobLayout& out, const std::string& token, int32_t rank, const std::string& address,
                     int32_t timeout_ms) override {
    if (!state_->token_is_right(token)) state_->note_wrong_token(rank, peer_);
    guarded(token, [&] { out = state_->register_rank(rank, address, timeout_ms); });
  }
  void store_set(const std::string& token, const std::string& key, const std::string& value) override {
    guarded(token, [&] { state_->set(key, value); });
  }
  void store_get(std::string& out, const std::string& token, const std::string& key, int32_t timeout_ms) override {
    guarded(token, [&] { out = state_->get(key, timeout_ms); });
  }
  void barrier(const std::string& token, const std::string& name, int32_t rank, int32_t timeout_ms) override {
    guarded(token, [&] { state_->barrier(name, rank, timeout_ms); });
  }
  void heartbeat(std::string& out, const std::string& token, int32_t rank) override {
    guarded(token, [&] {
      out = state_->heartbeat(rank);
      heartbeat_rank_ = rank;
    });
  }
  int64_t now_ns(const std::string& token) override {
    int64_t now = 0;
    guarded(token, [&] {
      now = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
    });
    return now;
  }
  void report_failure(const std::string& token, int32_t rank, const std::string& reason) override {
    guarded(token, [&] { state_->report_failure(rank, reason); });
  }
  void leave(const std::string& token, int32_t rank) override {
    guarded(token, [&] { state_->leave(rank); });
  }

 private:
  // Bad requests become RendezvousFailed (REFUSED) for the caller; nothing escapes as a crash.
  template <typename Body>
  void guarded(const std::string& token, Body body) {
    state_->check_token(token);
    try {
      body();
    } catch (const wire::RendezvousFailed&) {
      throw;
    } catch (const std::exception& e) {
      refuse(e.what(), wire::RendezvousError::REFUSED);
    }
  }

  std::shared_ptr<RendezvousState> state_;
  std::string peer_;   // the connection's host, for messages
  int heartbeat_rank_ = -1;
};

class HandlerFactory : public wire::RendezvousIfFactory {
 public:
  explicit HandlerFactory(std::shared_ptr<RendezvousState> state) : state_(std::move(state)) {}
  wire::RendezvousIf* getHandler(const apache::thrift::TConnectionInfo& info) override {
    std::string peer = "an unknown address";
    if (auto socket = std::dynamic_pointer_cast<apache::thrift::transport::TSocket>(info.transport))
      peer = socket->getPeerAddress();
    return new RendezvousHandler(state_, std::move(peer));
  }
  void releaseHandler(wire::RendezvousIf* handler) override { delete handler; }

 private:
  std::shared_ptr<RendezvousState> state_;
};

}  // namespace

RendezvousServer::RendezvousServer(const HostPort& bind, RendezvousConfig config) {
  PW_INPUT_CHECK(config.world_size >= 1, "a job needs at least one rank, got world size " << config.world_size);
  PW_INPUT_CHECK(config.pipeline_stages >= 1 && config.world_size % config.pipeline_stages == 0,
                 "world size " << config.world_size << " is not a multiple of " << config.pipeline_stages
                               << " pipeline stages; give stages x replicas ranks");
  PW_INPUT_CHECK(config.heartbeat_timeout.count() > 0, "the heartbeat timeout must be positive");
  check_job_token(config.job_token, "the rendezvous job token");
  Tls tls = config.tls;
  state_ = std::make_shared<RendezvousState>(std::move(config));
  server_ = std::make_unique<ThriftServer>(
      bind, std::make_shared<wire::RendezvousProcessorFactory>(std::make_shared<HandlerFactory>(state_)),
      kMaxRendezvousMessage, kDefaultMaxConnections, GateLimits{}, std::move(tls));
}

RendezvousServer::~RendezvousServer() {
  state_->stop();    // connections closing now are not lost ranks
  server_.reset();
}

HostPort RendezvousServer::address() const { return server_->address(); }
bool RendezvousServer::wait_until_all_left(std::chrono::milliseconds timeout) {
  return state_->wait_until_all_left(timeout);
}
std::string RendezvousServer::failure() const { return state_->failure(); }

}  // namespace pw::rpc
