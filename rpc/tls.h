#pragma once
// Mutual TLS for every Thrift link of a job: stage transports, the rendezvous and heartbeats, and
// parameter servers. One TlsContext (this host's certificate and key, and the job's CA) makes both
// ends of a link, through Thrift's SSL sockets over OpenSSL:
//   - a server requires a client certificate and verifies it against the job's CA;
//   - a client verifies the server's certificate against the job's CA;
//   - names are not checked: the CA is the job's own (it signs only the job's hosts), so a
//     certificate of it is what proves a peer belongs to the job, whatever address it is reached
//     at (ranks reach each other at the addresses the rendezvous hands out, often bare IPs);
//   - TLS 1.2 only, so that a refused client certificate fails the handshake itself, where a
//     client can name it, and not its first call (TLS 1.3 reports it after the handshake).
// A null context (`Tls{}`) means plain TCP, as without TLS.
#include <chrono>
#include <memory>
#include <string>

#include "core/error.h"
#include "rpc/host_port.h"

namespace apache::thrift {
class TConfiguration;
}
namespace apache::thrift::transport {
class TSocket;
class TServerSocket;
}  // namespace apache::thrift::transport

namespace pw::rpc {

// PEM files: this host's certificate (a chain may follow it), its private key (unencrypted), and
// the job's CA certificate(s). All three or none.
// Where a launcher gives a rank or server its files (`pipewright launch --tls-*` sets them on every
// process it starts; the pipewright command reads them when its own --tls-* flags are not given).
inline constexpr const char* kTlsCertEnv = "PW_TLS_CERT";
inline constexpr const char* kTlsKeyEnv = "PW_TLS_KEY";
inline constexpr const char* kTlsCaEnv = "PW_TLS_CA";

struct TlsFiles {
  std::string cert;
  std::string key;
  std::string ca;
  bool empty() const { return cert.empty() && key.empty() && ca.empty(); }
};

class TlsContext;
using Tls = std::shared_ptr<const TlsContext>;   // null: plain TCP

// A TLS handshake failed: the peer has no certificate of the job's CA (or none), or does not speak
// TLS. Not retried: certificates do not change while a job waits. An input error (status 2).
class TlsError : public InputError {
 public:
  // "<where>: TLS handshake failed: <reason>"
  TlsError(const std::string& where, std::string reason)
      : InputError(where + ": TLS handshake failed: " + reason), reason_(std::move(reason)) {}
  const std::string& reason() const { return reason_; }   // OpenSSL's, in words
  std::string failure() const { return "TLS handshake failed: " + reason_; }

 private:
  std::string reason_;
};

// Reads and checks the files: each readable and PEM, the key that of the certificate, the
// certificate signed by the CA. InputError naming the file otherwise. Empty files: null (plain).
Tls load_tls(const TlsFiles& files);

// A client socket towards `address`: TLS when `tls` is set, else plain. Not yet open.
std::shared_ptr<apache::thrift::transport::TSocket> make_client_socket(
    const Tls& tls, const HostPort& address, std::shared_ptr<apache::thrift::TConfiguration> config = nullptr);

// Connects `socket` (made by make_client_socket for `address`) within `timeout` and, for TLS,
// does the whole handshake now, so that a refused certificate is known here: TlsError
// "<address>: TLS handshake failed: <OpenSSL's reason>". A connect that fails (refused, timed
// out) throws TTransportException as TSocket::open does, for the caller to retry. Leaves the send
// and receive timeouts at `timeout`.
void open_client_socket(apache::thrift::transport::TSocket& socket, const HostPort& address,
                        std::chrono::milliseconds timeout);

// A listening socket for a Thrift server at `bind`: TLS when `tls` is set. Accepted TLS
// connections do their handshake on their first read, on their own thread, under the
// connection gate's first-call deadline (rpc/connection_gate.h).
std::shared_ptr<apache::thrift::transport::TServerSocket> make_server_socket(const Tls& tls, const HostPort& bind);

// "TLS handshake failed: <reason>" when `e` is a failed TLS handshake on an accepted connection;
// empty otherwise. For the one line a server logs about a refused peer.
std::string refused_handshake(const std::exception& e);

}  // namespace pw::rpc
