#pragma once
// Serves a registry's exposition over HTTP/1.1 (Boost.Beast): GET /metrics answers 200 with
// "text/plain; version=0.0.4"; any other path 404, any other method 405. One background thread
// serves one connection at a time; a client that does not finish its request within 5 seconds is
// dropped, so none can hold the server. With a bearer token (a server other hosts can reach), a
// request must carry "Authorization: Bearer <token>" or is answered 401.
#include <cstdint>
#include <memory>
#include <string>

#include "train/monitor/metrics_registry.h"

namespace pw::monitor {

class MetricsServer {
 public:
  // Binds host:port (port 0: any free port); InputError naming the address when it cannot.
  MetricsServer(const std::string& host, int port, const MetricsRegistry& registry, std::string bearer_token = {});
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const;
  std::string url() const;   // http://host:port/metrics

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// GET http://host:port/path with a deadline; the body of a 200 answer, else Error naming the
// address and the status or failure. What `pipewright top` and the tests use.
std::string http_get(const std::string& host, int port, const std::string& path, int timeout_ms,
                     const std::string& bearer_token = {});

}  // namespace pw::monitor
