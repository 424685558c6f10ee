#pragma once
// A parameter server on the wire: PsShard behind the ParameterServer Thrift service, every call
// checked for the job token; bad requests come back to the caller as PsError and never stop it.
#include <memory>

#include "dataparallel/ps/shard.h"
#include "rpc/connection_gate.h"
#include "rpc/host_port.h"
#include "rpc/tls.h"

namespace pw::rpc {
class ThriftServer;
}

namespace pw::dp {

class PsServer {
 public:
  // `gate`: how long a new connection has to make its first call with the token, and how many
  // such unproven connections are held at once (rpc/connection_gate.h).
  // With `tls`, every connection is mutual TLS (rpc/tls.h).
  PsServer(const rpc::HostPort& bind, PsShardConfig config, std::string job_token, rpc::GateLimits gate = {},
           rpc::Tls tls = {});
  ~PsServer();
  PsServer(const PsServer&) = delete;
  PsServer& operator=(const PsServer&) = delete;

  rpc::HostPort address() const;
  PsShard& shard() { return *shard_; }
  const rpc::ConnectionGate& gate() const;

 private:
  std::shared_ptr<PsShard> shard_;
  std::unique_ptr<rpc::ThriftServer> server_;
};

}  // namespace pw::dp
