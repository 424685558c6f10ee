#pragma once
// A Thrift server on its own thread, RAII: listening once constructed, stopped and joined when
// destroyed (open connections are interrupted, so a connected peer never delays shutdown).
// Framed transport with a maximum frame size (read without buffering whole frames), binary
// protocol, one thread per connection.
#include <cstddef>
#include <memory>
#include <thread>

#include <thrift/TProcessor.h>

#include "rpc/host_port.h"

namespace apache::thrift::server {
class TThreadedServer;
}

namespace pw::rpc {

// Connections served at once; further ones wait in the listen queue until one closes.
inline constexpr int kDefaultMaxConnections = 256;

class ThriftServer {
 public:
  // Binds to `bind` (port 0: any free port). Throws Error naming the address when it cannot listen.
  ThriftServer(const HostPort& bind, std::shared_ptr<apache::thrift::TProcessor> processor,
               std::size_t max_message_bytes, int max_connections = kDefaultMaxConnections);
  // One processor per connection (the handler learns when its connection closes).
  ThriftServer(const HostPort& bind, std::shared_ptr<apache::thrift::TProcessorFactory> factory,
               std::size_t max_message_bytes, int max_connections = kDefaultMaxConnections);
  ~ThriftServer();
  ThriftServer(const ThriftServer&) = delete;
  ThriftServer& operator=(const ThriftServer&) = delete;

  const HostPort& address() const { return address_; }   // with the bound port

 private:
  template <typename ProcessorOrFactory>
  void start(const HostPort& bind, std::shared_ptr<ProcessorOrFactory> processor, std::size_t max_message_bytes,
             int max_connections);

  std::shared_ptr<apache::thrift::server::TThreadedServer> server_;
  std::thread thread_;
  HostPort address_;
};

}  // namespace pw::rpc
