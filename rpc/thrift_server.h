#pragma once
// A Thrift server on its own thread, RAII: listening once constructed, stopped and joined when
// destroyed (open connections are interrupted, so a connected peer never delays shutdown).
// Framed transport with a maximum frame size (read without buffering whole frames), binary
// protocol, one thread per connection. With `tls`, every connection is mutual TLS (rpc/tls.h).
#include <cstddef>
#include <memory>
#include <thread>

#include <thrift/TProcessor.h>

#include "rpc/connection_gate.h"
#include "rpc/host_port.h"
#include "rpc/tls.h"

namespace apache::thrift::server {
class TThreadedServer;
}

namespace pw::rpc {

// Proven connections (a call carried the job's token) served at once; further ones wait in the
// listen queue until one closes. Unproven ones have slots of their own (rpc/connection_gate.h).
inline constexpr int kDefaultMaxConnections = 256;

class ThriftServer {
 public:
  // Binds to `bind` (port 0: any free port). Throws Error naming the address when it cannot listen.
  ThriftServer(const HostPort& bind, std::shared_ptr<apache::thrift::TProcessor> processor,
               std::size_t max_message_bytes, int max_connections = kDefaultMaxConnections, GateLimits gate = {},
               Tls tls = {});
  // One processor per connection (the handler learns when its connection closes).
  ThriftServer(const HostPort& bind, std::shared_ptr<apache::thrift::TProcessorFactory> factory,
               std::size_t max_message_bytes, int max_connections = kDefaultMaxConnections, GateLimits gate = {},
               Tls tls = {});
  ~ThriftServer();
  ThriftServer(const ThriftServer&) = delete;
  ThriftServer& operator=(const ThriftServer&) = delete;

  const HostPort& address() const { return address_; }   // with the bound port
  const ConnectionGate& gate() const { return *gate_; }

 private:
  void start(const HostPort& bind, std::shared_ptr<apache::thrift::TProcessorFactory> factory,
             std::size_t max_message_bytes, int max_connections, GateLimits gate, Tls tls);

  std::shared_ptr<ConnectionGate> gate_;
  std::shared_ptr<apache::thrift::server::TThreadedServer> server_;
  std::thread thread_;
  HostPort address_;
};

}  // namespace pw::rpc
