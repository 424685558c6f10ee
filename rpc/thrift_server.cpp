#include "rpc/thrift_server.h"

#include <chrono>
#include <climits>
#include <future>
#include <mutex>

#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/server/TThreadedServer.h>
#include <thrift/transport/TServerSocket.h>

#include "core/error.h"
#include "core/log.h"
#include "rpc/streaming_framed_transport.h"
#include "rpc/thrift_output.h"

namespace pw::rpc {

namespace {

using apache::thrift::TConfiguration;
namespace transport = apache::thrift::transport;
namespace server = apache::thrift::server;
namespace protocol = apache::thrift::protocol;

constexpr int kMaxListElements = 1 << 20;
constexpr auto kStartTimeout = std::chrono::seconds(30);

// Fulfilled once: by preServe (listening) or by the serving thread's failure.
class StartSignal : public server::TServerEventHandler {
 public:
  void preServe() override { settle(nullptr); }
  void fail(std::exception_ptr error) { settle(std::move(error)); }
  std::future<void> future() { return promise_.get_future(); }

 private:
  void settle(std::exception_ptr error) {
    std::call_once(once_, [&] {
      if (error) promise_.set_exception(error);
      else promise_.set_value();
    });
  }
  std::once_flag once_;
  std::promise<void> promise_;
};

}  // namespace

ThriftServer::ThriftServer(const HostPort& bind, std::shared_ptr<apache::thrift::TProcessor> processor,
                           std::size_t max_message_bytes, int max_connections, GateLimits gate, Tls tls) {
  start(bind, std::make_shared<apache::thrift::TSingletonProcessorFactory>(std::move(processor)), max_message_bytes,
        max_connections, gate, std::move(tls));
}

ThriftServer::ThriftServer(const HostPort& bind, std::shared_ptr<apache::thrift::TProcessorFactory> factory,
                           std::size_t max_message_bytes, int max_connections, GateLimits gate, Tls tls) {
  start(bind, std::move(factory), max_message_bytes, max_connections, gate, std::move(tls));
}

void ThriftServer::start(const HostPort& bind, std::shared_ptr<apache::thrift::TProcessorFactory> factory,
                         std::size_t max_message_bytes, int max_connections, GateLimits gate, Tls tls) {
  PW_CHECK(max_connections > 0 && max_connections <= (1 << 20),
           "a server serves 1 to 1048576 connections, asked for " << max_connections);
  PW_CHECK(gate.unproven_slots > 0 && gate.unproven_slots <= (1 << 20) && gate.first_call_deadline.count() > 0,
           "a server needs unproven slots and a first-call deadline above 0");
  gate_ = std::make_shared<ConnectionGate>(std::move(factory), gate);
  PW_CHECK(max_message_bytes > 0 && max_message_bytes <= static_cast<std::size_t>(INT_MAX),
           "Thrift messages are limited to " << INT_MAX << " bytes, asked for " << max_message_bytes);
  route_thrift_output_to_log();
  const int limit = static_cast<int>(max_message_bytes);
  auto config = std::make_shared<TConfiguration>(limit, limit);
  // TLS connections do their handshake on their own thread, within the gate's first-call deadline.
  auto socket = make_server_socket(tls, bind);
  auto signal = std::make_shared<StartSignal>();
  server_ = std::make_shared<server::TThreadedServer>(
      std::shared_ptr<apache::thrift::TProcessorFactory>(gate_), socket, std::make_shared<StreamingFramedTransportFactory>(config),
      std::make_shared<protocol::TBinaryProtocolFactory>(limit, kMaxListElements, /*strict_read=*/true,
                                                       /*strict_write=*/true));
  server_->setServerEventHandler(signal);
  // Unproven connections are held to their own slots by the gate, so they never fill these.
  server_->setConcurrentClientLimit(max_connections + gate.unproven_slots);
  auto started = signal->future();
  thread_ = std::thread([server = server_, signal] {
    try {
      server->serve();
    } catch (...) {
      signal->fail(std::current_exception());
    }
  });
  const auto give_up = [&](const std::string& why) {
    server_->stop();
    thread_.join();
    PW_FAIL("cannot serve on " << bind.str() << ": " << why);
  };
  if (started.wait_for(kStartTimeout) != std::future_status::ready) give_up("the server did not start");
  try {
    started.get();
  } catch (const std::exception& e) {
    give_up(e.what());
  }
  address_ = HostPort{bind.host, socket->getPort()};
}

ThriftServer::~ThriftServer() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace pw::rpc
