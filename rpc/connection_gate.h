#pragma once
// Admission of a server's connections. A connection is unproven until a call on it carries the
// job's token (the handler that checked the token calls mark_connection_proven() on the serving
// thread). An unproven connection that has not made such a call within a deadline (default 5 s)
// of connecting is shut down, whatever it is doing (silent, trickling bytes, sending calls
// without the token, or not reading the answers). Unproven connections have slots of their own
// (default 64), the oldest shut down when a new one needs a slot.
// So connections that send nothing, or not the job's token, never hold the slots of the job's
// ranks, and a rank connecting during a flood of them still gets in. On a TLS server the handshake
// happens within the same deadline, and a peer that fails it is refused with one logged line.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>
#include <thread>

#include <thrift/TProcessor.h>

namespace pw::rpc {

struct GateLimits {
  std::chrono::milliseconds first_call_deadline{5000};
  int unproven_slots = 64;
  // Wrong-token attempts a host may make at once, and the rate its budget refills at (below).
  int wrong_token_burst = 16;
  double wrong_tokens_per_second = 2.0;
};

// Called by a handler once the call it serves carried the job's token; a no-op off a gated server.
void mark_connection_proven();
// "host:port" of the peer whose call this thread serves; empty off a gated server.
std::string serving_peer_address();

// Wrong-token attempts are rate-limited per peer host: each host has a budget of
// GateLimits::wrong_token_burst attempts, refilled at wrong_tokens_per_second. Once a host's budget
// is spent, a new (unproven) connection from it waits for its turn, one every 1/rate s,
// before its first call is read (closed if that is past its first-call deadline), so guessing
// the token goes no faster than that while the job's own ranks on that host are only delayed.
// Called by a handler for a call that carried a wrong token: true for the host's first such call
// (log it in one line); the rest are counted and logged as one summary line a minute.
bool note_wrong_token();

class ConnectionGate : public apache::thrift::TProcessorFactory, public std::enable_shared_from_this<ConnectionGate> {
 public:
  ConnectionGate(std::shared_ptr<apache::thrift::TProcessorFactory> inner, GateLimits limits);
  ~ConnectionGate() override;
  std::shared_ptr<apache::thrift::TProcessor> getProcessor(const apache::thrift::TConnectionInfo& info) override;

  int unproven() const;        // connections waiting to prove themselves
  std::int64_t wrong_tokens() const;   // calls refused for a wrong token, over every host
  std::int64_t throttled() const;      // connections made to wait because their host's budget was spent
  std::int64_t evicted() const;   // unproven connections shut down to make room for newer ones
  std::int64_t expired() const;   // unproven connections shut down at their deadline

 private:
  friend class GatedProcessor;
  struct Unproven {
    int fd;
    std::chrono::steady_clock::time_point deadline;
  };
  bool forget(std::uint64_t id);   // true when it was still unproven and not shut down
  bool note_wrong_token(const std::string& host);   // true for the host's first
  // How long a new connection from `host` waits before its call is read (zero while the host has
  // budget); nothing when its turn would come after `deadline` (it is closed; the turn stays free).
  std::optional<std::chrono::steady_clock::duration> wrong_token_wait(const std::string& host,
                                                                     std::chrono::steady_clock::time_point deadline);
  std::vector<std::string> summarise_wrong_tokens(bool all);   // under mutex_; the lines to log
  void reap(std::stop_token stop);

  std::shared_ptr<apache::thrift::TProcessorFactory> inner_;
  GateLimits limits_;
  mutable std::mutex mutex_;
  std::condition_variable_any wake_;
  std::uint64_t next_id_ = 0;
  // Oldest first. A connection leaves the map before its socket is closed, so a descriptor found
  // here is still that connection's and may be shut down.
  std::map<std::uint64_t, Unproven> unproven_;
  std::int64_t evicted_ = 0;
  std::int64_t expired_ = 0;
  struct WrongTokens {
    double budget = 0.0;   // set to the burst when the host is first seen
    std::chrono::steady_clock::time_point refilled = std::chrono::steady_clock::now();
    std::chrono::steady_clock::time_point summarised = std::chrono::steady_clock::now();
    std::int64_t unlogged = 0;   // attempts since the last line about this host
    std::chrono::steady_clock::time_point next_turn{};   // of a connection from it, once its budget is spent
    std::int64_t closed = 0;     // connections made to wait since then
  };
  void refill(WrongTokens& w, std::chrono::steady_clock::time_point now) const;
  std::map<std::string, WrongTokens> wrong_by_host_;
  std::int64_t wrong_tokens_ = 0;
  std::int64_t throttled_ = 0;
  std::jthread reaper_;   // last: stopped and joined first
};

}  // namespace pw::rpc
