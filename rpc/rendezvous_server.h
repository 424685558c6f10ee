#pragma once
// The rendezvous service rank 0 runs for a multi-process job: ranks register their transport
// addresses and receive the job layout, share a key-value store, meet at barriers, and keep a
// heartbeat connection open. A rank whose heartbeat connection closes before it left (its
// process died) or that stays silent past the heartbeat timeout (hung, or its host is gone)
// fails the job; every other rank learns the reason from its next heartbeat.
#include <chrono>
#include <memory>
#include <string>

#include "rpc/host_port.h"
#include "rpc/tls.h"

namespace pw::rpc {

struct RendezvousConfig {
  int world_size = 1;
  int pipeline_stages = 1;   // rank r is stage r % stages, replica r / stages
  std::string job_token;
  std::chrono::milliseconds heartbeat_timeout{std::chrono::seconds(5)};
  Tls tls;   // set: every connection is mutual TLS (rpc/tls.h)
};

class RendezvousState;
class ThriftServer;

class RendezvousServer {
 public:
  // Listens on `bind` (port 0: any free port). Throws InputError for a bad config, Error when the
  // address cannot be bound.
  RendezvousServer(const HostPort& bind, RendezvousConfig config);
  ~RendezvousServer();
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  HostPort address() const;
  // Waits until every rank that registered has left or the job failed, at most `timeout`; true
  // when all left. Rank 0 calls it before shutting the service down, so no rank loses its
  // rendezvous while finishing.
  bool wait_until_all_left(std::chrono::milliseconds timeout);
  std::string failure() const;   // "" while healthy

 private:
  std::shared_ptr<RendezvousState> state_;
  std::unique_ptr<ThriftServer> server_;
};

}  // namespace pw::rpc
