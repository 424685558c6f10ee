#include "rpc/connection_gate.h"

#include <sys/socket.h>

#include <algorithm>

#include <thrift/transport/TSocket.h>

#include "core/error.h"
#include "core/log.h"
#include "rpc/tls.h"

namespace pw::rpc {

namespace transport = apache::thrift::transport;
using apache::thrift::TProcessor;
using apache::thrift::protocol::TProtocol;

class GatedProcessor;

namespace {
thread_local GatedProcessor* t_serving = nullptr;   // the gated connection this thread serves a call of
}

class GatedProcessor : public TProcessor {
 public:
  GatedProcessor(std::shared_ptr<ConnectionGate> gate, std::uint64_t id, std::shared_ptr<TProcessor> inner,
                 std::shared_ptr<transport::TSocket> socket, std::chrono::milliseconds deadline)
      : gate_(std::move(gate)), id_(id), inner_(std::move(inner)), socket_(std::move(socket)), deadline_(deadline) {
    // Until it proves itself a connection may not hold its thread past the deadline, reading or
    // writing (a peer that sends calls and never reads the answers blocks the send).
    if (socket_) {
      socket_->setRecvTimeout(static_cast<int>(deadline_.count()));
      socket_->setSendTimeout(static_cast<int>(deadline_.count()));
    }
  }

  ~GatedProcessor() override { gate_->forget(id_); }

  bool process(std::shared_ptr<TProtocol> in, std::shared_ptr<TProtocol> out, void* context) override {
    // A host that spent its wrong-token budget has its new connections read one at a time.
    if (!proven_) {
      const auto wait = gate_->wrong_token_wait(host(), opened_ + deadline_);
      if (!wait) {   // no turn before its deadline: closed, and the turn not taken from the next one
        gate_->forget(id_);
        return false;
      }
      if (wait->count() > 0) std::this_thread::sleep_for(*wait);
    }
    struct Serving {
      GatedProcessor* previous = t_serving;
      explicit Serving(GatedProcessor* p) { t_serving = p; }
      ~Serving() { t_serving = previous; }
    } serving(this);
    bool keep = false;
    try {
      keep = inner_->process(std::move(in), std::move(out), context);
    } catch (const std::exception& e) {
      // A TLS peer without a certificate of the job's CA (or a peer without TLS) fails the
      // handshake on its first read: one line, and the connection closes. Connections the gate
      // already shut down (silent past the deadline, evicted) are not reported.
      const bool shut_by_gate = !gate_->forget(id_);
      if (const std::string refused = proven_ ? std::string() : refused_handshake(e); !refused.empty()) {
        if (!shut_by_gate) PW_LOG(Warn, "refused a connection from " << peer() << ": " << refused);
        return false;
      }
      throw;
    } catch (...) {
      gate_->forget(id_);   // the connection ends: its descriptor must not be shut down once reused
      throw;
    }
    if (!proven_ && std::chrono::steady_clock::now() - opened_ > deadline_) {
      // Answered, but still without the job's token after the deadline: the connection goes.
      gate_->forget(id_);
      PW_LOG(Debug, "closing a connection that sent no call with the job's token within its deadline");
      return false;
    }
    if (!keep) gate_->forget(id_);
    return keep;
  }

  std::string peer() const {
    if (!socket_) return "a peer";
    try {
      return socket_->getPeerAddress() + ":" + std::to_string(socket_->getPeerPort());
    } catch (...) {
      return "a peer";
    }
  }

  std::string host() const {
    if (!socket_) return "a peer";
    try {
      return socket_->getPeerAddress();
    } catch (...) {
      return "a peer";
    }
  }

  bool note_wrong_token() { return gate_->note_wrong_token(host()); }

  void prove() {
    if (proven_) return;
    proven_ = true;
    gate_->forget(id_);
    if (socket_) {   // a proven connection may stay idle between calls
      socket_->setRecvTimeout(0);
      socket_->setSendTimeout(0);
    }
  }

 private:
  std::shared_ptr<ConnectionGate> gate_;
  std::uint64_t id_;
  std::shared_ptr<TProcessor> inner_;
  std::shared_ptr<transport::TSocket> socket_;
  std::chrono::milliseconds deadline_;
  std::chrono::steady_clock::time_point opened_ = std::chrono::steady_clock::now();
  bool proven_ = false;
};

void mark_connection_proven() {
  if (t_serving != nullptr) t_serving->prove();
}

std::string serving_peer_address() { return t_serving != nullptr ? t_serving->peer() : std::string(); }

bool note_wrong_token() { return t_serving == nullptr || t_serving->note_wrong_token(); }

ConnectionGate::ConnectionGate(std::shared_ptr<apache::thrift::TProcessorFactory> inner, GateLimits limits)
    : inner_(std::move(inner)), limits_(limits), reaper_([this](std::stop_token stop) { reap(stop); }) {}

ConnectionGate::~ConnectionGate() {
  reaper_.request_stop();
  if (reaper_.joinable()) reaper_.join();
  std::vector<std::string> lines;
  {
    std::lock_guard lock(mutex_);
    lines = summarise_wrong_tokens(true);
  }
  for (const auto& line : lines) PW_LOG(Warn, line);
}

void ConnectionGate::refill(WrongTokens& w, std::chrono::steady_clock::time_point now) const {
  w.budget = std::min<double>(limits_.wrong_token_burst,
                              w.budget + limits_.wrong_tokens_per_second * std::chrono::duration<double>(now - w.refilled).count());
  w.refilled = now;
}

bool ConnectionGate::note_wrong_token(const std::string& host) {
  std::lock_guard lock(mutex_);
  ++wrong_tokens_;
  const auto now = std::chrono::steady_clock::now();
  const auto [it, first] = wrong_by_host_.try_emplace(host);
  auto& w = it->second;
  if (first) w.budget = limits_.wrong_token_burst;
  refill(w, now);
  w.budget = std::max(0.0, w.budget - 1.0);
  if (first) {
    w.summarised = now;
    return true;
  }
  ++w.unlogged;
  return false;
}

std::optional<std::chrono::steady_clock::duration> ConnectionGate::wrong_token_wait(
    const std::string& host, std::chrono::steady_clock::time_point deadline) {
  std::lock_guard lock(mutex_);
  const auto it = wrong_by_host_.find(host);
  if (it == wrong_by_host_.end()) return std::chrono::steady_clock::duration{};
  auto& w = it->second;
  const auto now = std::chrono::steady_clock::now();
  refill(w, now);
  if (w.budget >= 1.0) return std::chrono::steady_clock::duration{};
  const auto interval = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(1.0 / limits_.wrong_tokens_per_second));
  const auto turn = std::max(now, w.next_turn) + interval;
  ++w.closed;
  ++throttled_;
  if (turn > deadline) return std::nullopt;
  w.next_turn = turn;
  return turn - now;
}

std::vector<std::string> ConnectionGate::summarise_wrong_tokens(bool all) {
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::string> lines;
  for (auto it = wrong_by_host_.begin(); it != wrong_by_host_.end();) {
    auto& [host, w] = *it;
    refill(w, now);
    if (w.unlogged == 0 && w.closed == 0) {
      // Quiet for a minute with its budget back: forgotten, so the table stays small.
      const bool idle = w.budget >= limits_.wrong_token_burst && now - w.summarised > std::chrono::seconds(60);
      it = idle ? wrong_by_host_.erase(it) : std::next(it);
      continue;
    }
    if (all || now - w.summarised >= std::chrono::seconds(60)) {
      lines.push_back("refused " + std::to_string(w.unlogged) + " more call(s) with a wrong job token from " + host +
                      " in the last " +
                      std::to_string(static_cast<long long>(std::chrono::duration<double>(now - w.summarised).count())) +
                      " s, and made " + std::to_string(w.closed) + " new connection(s) from it wait or close (rate " +
                      "limit: " + std::to_string(limits_.wrong_token_burst) + " attempts, then " +
                      std::to_string(static_cast<int>(limits_.wrong_tokens_per_second)) + " a second)");
      w.unlogged = 0;
      w.closed = 0;
      w.summarised = now;
    }
    ++it;
  }
  return lines;
}

std::shared_ptr<TProcessor> ConnectionGate::getProcessor(const apache::thrift::TConnectionInfo& info) {
  auto socket = std::dynamic_pointer_cast<transport::TSocket>(info.transport);
  std::uint64_t id = 0;
  {
    std::lock_guard lock(mutex_);
    id = next_id_++;
  }
  // Made before the connection is registered: if making it throws, nothing is left in the map
  // whose descriptor could later belong to another connection.
  auto processor = std::make_shared<GatedProcessor>(shared_from_this(), id, inner_->getProcessor(info), socket,
                                                    limits_.first_call_deadline);
  std::lock_guard lock(mutex_);
  while (!unproven_.empty() && static_cast<int>(unproven_.size()) >= limits_.unproven_slots) {
    // The oldest unproven connection makes room: shutting its socket down ends its thread's read
    // or write, and that thread then closes it.
    const auto oldest = unproven_.begin();
    if (oldest->second.fd >= 0) ::shutdown(oldest->second.fd, SHUT_RDWR);
    unproven_.erase(oldest);
    ++evicted_;
  }
  unproven_.emplace(id, Unproven{socket ? static_cast<int>(socket->getSocketFD()) : -1,
                                 std::chrono::steady_clock::now() + limits_.first_call_deadline});
  return processor;
}

void ConnectionGate::reap(std::stop_token stop) {
  const auto period = std::clamp(limits_.first_call_deadline / 4, std::chrono::milliseconds(10),
                                 std::chrono::milliseconds(1000));
  std::unique_lock lock(mutex_);
  while (!stop.stop_requested()) {
    wake_.wait_for(lock, stop, period, [] { return false; });
    const auto now = std::chrono::steady_clock::now();
    for (auto it = unproven_.begin(); it != unproven_.end();) {
      if (it->second.deadline > now) {
        ++it;
        continue;
      }
      if (it->second.fd >= 0) ::shutdown(it->second.fd, SHUT_RDWR);
      it = unproven_.erase(it);
      ++expired_;
    }
    const auto lines = summarise_wrong_tokens(false);
    if (lines.empty()) continue;
    lock.unlock();   // logging may block on stderr: not while every connection waits for the lock
    for (const auto& line : lines) PW_LOG(Warn, line);
    lock.lock();
  }
}

bool ConnectionGate::forget(std::uint64_t id) {
  std::lock_guard lock(mutex_);
  return unproven_.erase(id) > 0;
}

int ConnectionGate::unproven() const {
  std::lock_guard lock(mutex_);
  return static_cast<int>(unproven_.size());
}

std::int64_t ConnectionGate::evicted() const {
  std::lock_guard lock(mutex_);
  return evicted_;
}

std::int64_t ConnectionGate::wrong_tokens() const {
  std::lock_guard lock(mutex_);
  return wrong_tokens_;
}

std::int64_t ConnectionGate::throttled() const {
  std::lock_guard lock(mutex_);
  return throttled_;
}

std::int64_t ConnectionGate::expired() const {
  std::lock_guard lock(mutex_);
  return expired_;
}

}  // namespace pw::rpc
