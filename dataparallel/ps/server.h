#pragma once
// A parameter server on the wire: PsShard behind the ParameterServer Thrift service, every call
// checked for the job token; bad requests come back to the caller as PsError and never stop it.
#include <memory>

#include "dataparallel/ps/shard.h"
#include "rpc/host_port.h"

namespace pw::rpc {
class ThriftServer;
}

namespace pw::dp {

class PsServer {
 public:
  PsServer(const rpc::HostPort& bind, PsShardConfig config, std::string job_token);
  ~PsServer();
  PsServer(const PsServer&) = delete;
  PsServer& operator=(const PsServer&) = delete;

  rpc::HostPort address() const;
  PsShard& shard() { return *shard_; }

 private:
  std::shared_ptr<PsShard> shard_;
  std::unique_ptr<rpc::ThriftServer> server_;
};

}  // namespace pw::dp
