#pragma once
// A rank's side of the rendezvous: registration (returns the job layout), the shared store,
// barriers, failure reports and leaving; and the Heartbeat that keeps the rank counted alive and
// tells it when the job has failed elsewhere.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "pw_thrift/Rendezvous.h"
#include "rpc/host_port.h"
#include "rpc/store.h"
#include "rpc/tls.h"

namespace pw::rpc {

class RendezvousConnection;

class RendezvousClient : public Store {
 public:
  // With `tls`, every connection to the service is mutual TLS (rpc/tls.h).
  RendezvousClient(HostPort master, std::string job_token, int rank, Tls tls = {});
  ~RendezvousClient() override;

  // Retries connecting until the deadline (rank 0 may start last). Throws TimeoutError, or
  // AbortedError when the job already failed, TlsError when the TLS handshake fails, or Error
  // when the service refuses the rank.
  wire::JobLayout register_rank(const std::string& address, Deadline deadline);
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, Deadline deadline) override;
  void barrier(const std::string& name, Deadline deadline);
  // Best effort (never throws): tells the others why this rank stops.
  void report_failure(const std::string& reason) noexcept;
  void leave();   // before the heartbeat stops, so closing is not taken for a lost rank
  std::int64_t server_now_ns();

  const HostPort& master() const { return master_; }
  int rank() const { return rank_; }

 private:
  template <typename Call>
  auto call(const char* what, Deadline deadline, Call body);

  HostPort master_;
  std::string token_;
  int rank_;
  Tls tls_;
  std::mutex mutex_;   // one call at a time on the connection
  std::unique_ptr<RendezvousConnection> connection_;
};

// Sends a heartbeat every `interval` on its own connection. Calls `on_failure(reason)` once, from
// its thread, when the service reports the job failed or cannot be reached within `timeout`.
class Heartbeat {
 public:
  Heartbeat(HostPort master, std::string job_token, int rank, std::chrono::milliseconds interval,
            std::chrono::milliseconds timeout, std::function<void(const std::string&)> on_failure, Tls tls = {});
  ~Heartbeat();   // stops the thread and closes the connection
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  void stop();    // stops beating but keeps the connection open (call before leave())
  std::string failure() const;   // what on_failure was told, "" if nothing

 private:
  void loop();

  HostPort master_;
  std::string token_;
  int rank_;
  std::chrono::milliseconds interval_, timeout_;
  std::function<void(const std::string&)> on_failure_;
  std::unique_ptr<RendezvousConnection> connection_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::string failure_;
  std::thread thread_;
};

}  // namespace pw::rpc
