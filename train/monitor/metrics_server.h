#pragma once
// Serves a registry's exposition over HTTP/1.1 (Boost.Beast): GET /metrics answers 200 with
// "text/plain; version=0.0.4"; any other path 404, any other method 405. One background thread
// serves every open connection at once (up to 64; past that the oldest one still waiting for its
// request is closed); a client that does not finish its TLS handshake or its request within 5
// seconds is dropped, so no client can hold the server or delay another's answer. With a bearer token (a server other
// hosts can reach), a request must carry "Authorization: Bearer <token>" or is answered 401. With
// a certificate and key (a job with --tls-*), it serves HTTPS only (TLS 1.2 or later), so that the
// token and the figures are encrypted on the wire; clients verify it against the job's CA.
#include <cstdint>
#include <memory>
#include <string>

#include "train/monitor/metrics_registry.h"

namespace pw::monitor {

// PEM files: the server's certificate (a chain may follow it) and its unencrypted private key.
// Both empty: plain HTTP.
struct MetricsTls {
  std::string cert;
  std::string key;
  bool enabled() const { return !cert.empty() || !key.empty(); }
};

class MetricsServer {
 public:
  // Binds host:port (port 0: any free port); InputError naming the address when it cannot, or
  // the file when the certificate or key cannot be read or do not match.
  MetricsServer(const std::string& host, int port, const MetricsRegistry& registry, std::string bearer_token = {},
                const MetricsTls& tls = {});
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const;
  std::string url() const;   // http://host:port/metrics, or https://

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// GET http://host:port/path with a deadline; the body of a 200 answer, else Error naming the
// address and the status or failure. With `ca_file` (PEM), GET https:// instead, the server's
// certificate verified against it (names are not checked, as on the job's links: the CA is the
// job's own); a certificate it did not sign is an InputError. What `pipewright top` and the tests use.
std::string http_get(const std::string& host, int port, const std::string& path, int timeout_ms,
                     const std::string& bearer_token = {}, const std::string& ca_file = {});

}  // namespace pw::monitor
