#pragma once
// The launchers of a job of several nodes, with restarts, coordinate through a rendezvous service
// node 0's launcher serves at the master host, port + 1 (the same Rendezvous service rank 0 runs
// for the ranks, with one "rank" per node and the same job token). Each launcher joins it before
// any rank starts and keeps a heartbeat to it, so that a lost launcher ends the job on every node.
// Per attempt n:
//   - a launcher whose ranks fail sets "failed/<n>"; the others look for it (failure_announced)
//     and stop their ranks as for a local failure (grace, SIGTERM, SIGKILL);
//   - once all its ranks ended, each launcher sets "result/<n>/<node>" and waits at barrier
//     "end/<n>", so no rank of attempt n+1 starts while any rank of attempt n lives;
//   - node 0's launcher reads every result and sets "decision/<n>" (combine_node_outcomes, then
//     decide), which every launcher acts on: all restart together, with the same count and causes.
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "core/error.h"
#include "rpc/host_port.h"
#include "rpc/tls.h"
#include "train/launcher/restart_policy.h"

namespace pw::rpc {
class Heartbeat;
class RendezvousClient;
class RendezvousServer;
}  // namespace pw::rpc

namespace pw::launcher {

// The launchers' coordination broke (a launcher lost, late, or malformed): one line; the job ends
// with status 1.
class CoordinationError : public Error {
 public:
  using Error::Error;
};

class NodeAgent {
 public:
  // Joins the other launchers (node 0's serves them), waiting at most `timeout` for all of them.
  // `take_stop_request` (a signal number, or 0) is asked while waiting. InputError when the master
  // port has no port + 1 or the nodes' max_restarts differ; CoordinationError when one is late.
  // `tls`: mutual TLS between the launchers (rpc/tls.h).
  NodeAgent(const rpc::HostPort& master, const std::string& token, int node, int nnodes, int max_restarts,
            std::chrono::milliseconds timeout, std::function<int()> take_stop_request, rpc::Tls tls = {});
  // A launcher that ends without leave() (a signal, an error) tells the others why, so that they
  // stop at once instead of waiting for its heartbeat to go silent.
  ~NodeAgent();
  NodeAgent(const NodeAgent&) = delete;
  NodeAgent& operator=(const NodeAgent&) = delete;

  const rpc::HostPort& address() const { return address_; }
  void set_goodbye(const std::string& why) { goodbye_ = why; }   // what the others hear should this launcher end early

  // Why the launchers' coordination broke ("" while it holds): a launcher was lost or silent.
  std::string lost() const;

  // Tells the other launchers that this node's ranks failed in `attempt`.
  void announce_failure(int attempt);
  // Whether another launcher announced a failure in `attempt` (does not wait).
  bool failure_announced(int attempt);

  // After this node's ranks of `attempt` all ended: reports its outcome, waits for every other
  // launcher to get there, and returns what node 0's launcher decided. Nothing when
  // `take_stop_request` returns a signal while waiting (then stored in *stopped_by). Throws
  // CoordinationError when a launcher is lost or late.
  std::optional<Decision> finish(int attempt, const Outcome& mine, int max_restarts, int* stopped_by);

  // The job is over (done, or failed for good): leaves without being taken for a lost launcher;
  // node 0's launcher keeps serving until the others left (at most 10 s).
  void leave() noexcept;

 private:
  std::string decide_for_all(int attempt, int max_restarts, std::chrono::steady_clock::time_point deadline);
  std::string seconds_text() const;
  void patiently(std::chrono::steady_clock::time_point deadline, const std::string& late,
                 const std::function<void(std::chrono::steady_clock::time_point)>& call);
  std::string clean(std::string text) const;
  std::string reason_of(const Error& e) const;
  void note_lost(const Error& e);
  void guarded(const std::string& what, const std::function<void()>& body);
  void join(const rpc::HostPort& master, const std::string& token, int max_restarts);

  int node_, nnodes_;
  std::chrono::milliseconds timeout_;
  std::function<int()> take_stop_request_;
  rpc::Tls tls_;
  rpc::HostPort address_;
  std::unique_ptr<rpc::RendezvousServer> server_;
  std::unique_ptr<rpc::RendezvousClient> client_;
  std::unique_ptr<rpc::Heartbeat> heartbeat_;
  mutable std::mutex mutex_;
  std::string lost_;
  enum class Left { kNo, kYes } left_ = Left::kNo;
  std::string goodbye_;
};

}  // namespace pw::launcher
