#include "rpc/tls.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <vector>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <thrift/transport/TSSLServerSocket.h>
#include <thrift/transport/TSSLSocket.h>
#include <thrift/transport/TTransportException.h>

#include "rpc/thrift_output.h"

namespace pw::rpc {

namespace transport = apache::thrift::transport;
using apache::thrift::TConfiguration;

namespace {

// ---- Reading and checking the PEM files ---------------------------------------------------------

using BioPtr = std::unique_ptr<BIO, decltype(&BIO_free)>;
using X509Ptr = std::unique_ptr<X509, decltype(&X509_free)>;
using KeyPtr = std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)>;
using StorePtr = std::unique_ptr<X509_STORE, decltype(&X509_STORE_free)>;
using StoreCtxPtr = std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)>;
using StackPtr = std::unique_ptr<STACK_OF(X509), void (*)(STACK_OF(X509)*)>;

// An encrypted key is refused rather than prompted for on the terminal.
int no_password(char*, int, int, void*) { return 0; }

// OpenSSL's reason for the last failure, and the error queue emptied.
std::string openssl_reason() {
  std::string reason;
  while (const unsigned long code = ERR_get_error()) {
    if (!reason.empty()) continue;   // the first is the cause; the rest repeat it
    const char* text = ERR_reason_error_string(code);
    reason = text != nullptr ? text : "error " + std::to_string(code);
  }
  return reason.empty() ? "no details" : reason;
}

std::string read_pem_file(const std::string& path, const std::string& what) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error))
    throw InputError(what + " " + path + ": " +
                     (std::filesystem::exists(path, error) ? "not a file" : "no such file") + "; give a PEM file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(what + " " + path + ": cannot read this file (" + std::strerror(errno) + ")");
  std::ostringstream text;
  text << in.rdbuf();
  if (!in.good() && !in.eof()) throw InputError(what + " " + path + ": cannot read this file");
  return text.str();
}

BioPtr memory_bio(const std::string& text) {
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())), BIO_free);
}

// Every certificate in `text`, in order.
std::vector<X509Ptr> read_certificates(const std::string& text) {
  std::vector<X509Ptr> certs;
  auto bio = memory_bio(text);
  while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, no_password, nullptr)) certs.emplace_back(cert, X509_free);
  ERR_clear_error();   // the end of the file reads as an error
  return certs;
}

struct Material {
  std::vector<X509Ptr> chain;   // this host's certificate first
  KeyPtr key{nullptr, EVP_PKEY_free};
  std::vector<X509Ptr> authorities;
};

Material read_material(const TlsFiles& files) {
  Material m;
  m.chain = read_certificates(read_pem_file(files.cert, "TLS certificate"));
  if (m.chain.empty())
    throw InputError("TLS certificate " + files.cert + ": no PEM certificate in it (\"-----BEGIN CERTIFICATE-----\")");
  {
    const std::string text = read_pem_file(files.key, "TLS key");
    auto bio = memory_bio(text);
    m.key.reset(PEM_read_bio_PrivateKey(bio.get(), nullptr, no_password, nullptr));
    if (!m.key)
      throw InputError("TLS key " + files.key + ": not an unencrypted PEM private key (" + openssl_reason() +
                       "); give the key without a passphrase, e.g. openssl genpkey ... -out KEY");
  }
  m.authorities = read_certificates(read_pem_file(files.ca, "TLS CA"));
  if (m.authorities.empty())
    throw InputError("TLS CA " + files.ca + ": no PEM certificate in it (\"-----BEGIN CERTIFICATE-----\")");
  if (X509_check_private_key(m.chain.front().get(), m.key.get()) != 1) {
    ERR_clear_error();
    throw InputError("TLS key " + files.key + ": not the key of the certificate " + files.cert);
  }
  return m;
}

// Peers verify this host's certificate against the same CA: one that does not chain to it would
// be refused by every peer, so it is refused here, naming the files.
void check_signed_by_ca(const Material& m, const TlsFiles& files) {
  StorePtr store(X509_STORE_new(), X509_STORE_free);
  for (const auto& ca : m.authorities) X509_STORE_add_cert(store.get(), ca.get());
  StackPtr untrusted(sk_X509_new_null(), [](STACK_OF(X509)* s) { sk_X509_free(s); });
  for (std::size_t i = 1; i < m.chain.size(); ++i) sk_X509_push(untrusted.get(), m.chain[i].get());
  StoreCtxPtr ctx(X509_STORE_CTX_new(), X509_STORE_CTX_free);
  PW_CHECK(store && untrusted && ctx, "out of memory checking the TLS certificate");
  X509_STORE_CTX_init(ctx.get(), store.get(), m.chain.front().get(), untrusted.get());
  if (X509_verify_cert(ctx.get()) != 1) {
    const std::string why = X509_verify_cert_error_string(X509_STORE_CTX_get_error(ctx.get()));
    ERR_clear_error();
    throw InputError("TLS certificate " + files.cert + ": not valid under the CA in " + files.ca + " (" + why + ")");
  }
}

// ---- Sockets ------------------------------------------------------------------------------------

// "SSL_connect: sslv3 alert bad certificate (SSL_error_code = 1)" -> "sslv3 alert bad certificate".
std::string plain_reason(std::string what) {
  if (const auto code = what.find(" (SSL_error_code"); code != std::string::npos) what.erase(code);
  for (const char* prefix : {"SSL_get_verify_result(), ", "authorize: "})
    if (what.rfind(prefix, 0) == 0) what.erase(0, std::strlen(prefix));
  if (what.rfind("SSL_", 0) == 0)
    if (const auto colon = what.find(": "); colon != std::string::npos) what.erase(0, colon + 2);
  if (what == "required certificate not present") what = "the peer sent no certificate";
  return what.empty() ? "no details" : what;
}

// OpenSSL writes to its socket with write(), not send(MSG_NOSIGNAL) as Thrift's plain sockets do:
// a write to a connection the peer closed raises SIGPIPE, which ends a process that does not
// ignore it. While a TLS call runs, its thread blocks SIGPIPE, and a SIGPIPE the call raised is
// taken off before the thread's mask is restored; the call itself then fails with EPIPE, as a
// plain socket's does. Nothing process-wide changes.
class SigpipeShield {
 public:
  SigpipeShield() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe_, &previous_);
  }
  ~SigpipeShield() {
    if (!was_pending_) {
      sigset_t pending;
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE) == 1) {
        const timespec now{0, 0};
        while (sigtimedwait(&pipe_, nullptr, &now) < 0 && errno == EINTR) {
        }
      }
    }
    pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
  }
  SigpipeShield(const SigpipeShield&) = delete;
  SigpipeShield& operator=(const SigpipeShield&) = delete;

 private:
  sigset_t pipe_;
  sigset_t previous_;
  bool was_pending_ = false;
};

constexpr int kGoodbyeMs = 1000;

// A TLS socket of the job: chain-only verification (no access manager, so no name checks), a
// handshake that can be done at once, and no SIGPIPE from its writes.
class JobTlsSocket : public transport::TSSLSocket {
 public:
  // A client towards host:port.
  JobTlsSocket(std::shared_ptr<transport::SSLContext> ctx, const std::string& host, int port,
               std::shared_ptr<TConfiguration> config)
      : TSSLSocket(std::move(ctx), host, port, std::move(config)) {
    server(false);
  }
  // An accepted connection.
  JobTlsSocket(std::shared_ptr<transport::SSLContext> ctx, THRIFT_SOCKET fd, std::shared_ptr<THRIFT_SOCKET> interrupt)
      : TSSLSocket(std::move(ctx), fd, std::move(interrupt)) {
    server(true);
  }
  ~JobTlsSocket() override {
    try {
      close();   // here, shielded: the base destructor then finds nothing to shut down
    } catch (...) {
    }
  }

  bool peek() override {
    SigpipeShield shield;
    return TSSLSocket::peek();
  }
  // The TLS goodbye (close_notify) is best effort: it waits at most a second for room to write,
  // however long the connection's own send timeout (0: none) is.
  void close() override {
    SigpipeShield shield;
    if (TSocket::isOpen() && (sendTimeout_ <= 0 || sendTimeout_ > kGoodbyeMs)) setSendTimeout(kGoodbyeMs);
    TSSLSocket::close();
  }
  uint32_t read(uint8_t* buf, uint32_t len) override {
    SigpipeShield shield;   // an accepted connection's handshake happens in its first read
    try {
      return TSSLSocket::read(buf, len);
    } catch (const transport::TSSLException&) {
      // A connection closed before it sent a byte (a probe of the port, as the launcher's) is no
      // refused peer: it ends quietly.
      if (server() && !checkHandshake() && ssl_ != nullptr && BIO_number_read(SSL_get_rbio(ssl_)) == 0) {
        ERR_clear_error();
        throw transport::TTransportException(transport::TTransportException::END_OF_FILE,
                                             "closed before its TLS handshake");
      }
      throw;
    }
  }
  // Thrift's own write waits for a full send buffer with poll(POLLIN | POLLOUT), which returns at
  // once while the peer's answers sit unread, so a large write would spin until the buffer drains.
  // This one waits for what OpenSSL asks for (room to write, or bytes to read).
  void write(const uint8_t* buf, uint32_t len) override {
    SigpipeShield shield;
    initializeHandshake();   // at once when done
    uint32_t written = 0;
    while (written < len) {
      ERR_clear_error();
      const int n = SSL_write(ssl_, buf + written, static_cast<int>(std::min<uint32_t>(len - written, INT_MAX)));
      if (n > 0) {
        written += static_cast<uint32_t>(n);
        continue;
      }
      const int errno_copy = errno;
      const int error = SSL_get_error(ssl_, n);
      const bool retry = error == SSL_ERROR_WANT_WRITE || error == SSL_ERROR_WANT_READ ||
                         (error == SSL_ERROR_SYSCALL && (errno_copy == EINTR || errno_copy == EAGAIN));
      if (!retry) {
        const std::string reason = error == SSL_ERROR_SYSCALL && ERR_peek_error() == 0
                                       ? std::string(errno_copy != 0 ? std::strerror(errno_copy) : "connection closed")
                                       : openssl_reason();
        ERR_clear_error();
        throw transport::TSSLException("SSL_write: " + reason);
      }
      wait_for(error == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, sendTimeout_);
    }
  }
  uint32_t write_partial(const uint8_t* buf, uint32_t len) override {
    write(buf, len);
    return len;
  }
  void flush() override {
    SigpipeShield shield;
    TSSLSocket::flush();
  }

  // Waits until the socket is ready for `events`, at most `timeout_ms` (0: no limit). Throws
  // TTransportException: TIMED_OUT, or INTERRUPTED when the server is stopping.
  void wait_for(short events, int timeout_ms) {
    pollfd fds[2] = {{static_cast<int>(socket_), events, 0}, {-1, POLLIN, 0}};
    if (interruptListener_) fds[1].fd = static_cast<int>(*interruptListener_);
    while (true) {
      const int ready = ::poll(fds, interruptListener_ ? 2 : 1, timeout_ms > 0 ? timeout_ms : -1);
      if (ready < 0 && errno == EINTR) continue;
      if (ready < 0) throw transport::TTransportException(transport::TTransportException::UNKNOWN, "poll failed", errno);
      if (ready == 0) throw transport::TTransportException(transport::TTransportException::TIMED_OUT, "write timed out");
      if (interruptListener_ && (fds[1].revents & POLLIN) != 0)
        throw transport::TTransportException(transport::TTransportException::INTERRUPTED, "interrupted");
      return;
    }
  }

  // The client's whole handshake. A TLS 1.2 server checks the client's certificate within it, so
  // a refusal arrives here as the server's alert.
  void handshake(const HostPort& address) {
    SigpipeShield shield;
    try {
      initializeHandshake();
    } catch (const transport::TSSLException& e) {
      std::string reason = plain_reason(e.what());
      if (ssl_ != nullptr)
        if (const long verify = SSL_get_verify_result(ssl_); verify != X509_V_OK)
          reason += std::string(" (") + X509_verify_cert_error_string(verify) + ")";
      if (reason.find("unexpected eof") != std::string::npos || reason.find("wrong version number") != std::string::npos)
        reason += "; is the peer running without TLS?";
      ERR_clear_error();
      throw TlsError(address.str(), reason);
    }
  }
};

// Thrift's factory holds the SSL_CTX; it makes the job's sockets for both ends.
class JobSocketFactory : public transport::TSSLSocketFactory {
 public:
  JobSocketFactory() : TSSLSocketFactory(transport::SSLTLS) {}
  SSL_CTX* ctx() { return ctx_->get(); }

  std::shared_ptr<transport::TSSLSocket> createSocket(THRIFT_SOCKET fd) override {
    return std::make_shared<JobTlsSocket>(ctx_, fd, nullptr);
  }
  std::shared_ptr<transport::TSSLSocket> createSocket(THRIFT_SOCKET fd,
                                                      std::shared_ptr<THRIFT_SOCKET> interrupt) override {
    return std::make_shared<JobTlsSocket>(ctx_, fd, std::move(interrupt));
  }
  std::shared_ptr<JobTlsSocket> client(const HostPort& address, std::shared_ptr<TConfiguration> config) {
    return std::make_shared<JobTlsSocket>(ctx_, address.host, address.port, std::move(config));
  }
};

void install(SSL_CTX* ctx, const Material& m, const TlsFiles& files) {
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_max_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
  SSL_CTX_set_read_ahead(ctx, 1);   // whole socket reads, not a record header and its body apart
  SSL_CTX_set_default_passwd_cb(ctx, no_password);
  const auto fail = [&](const std::string& what) {
    throw InputError("TLS certificate " + files.cert + ": " + what + " (" + openssl_reason() + ")");
  };
  if (SSL_CTX_use_certificate(ctx, m.chain.front().get()) != 1) fail("cannot be used");
  for (std::size_t i = 1; i < m.chain.size(); ++i)
    if (SSL_CTX_add1_chain_cert(ctx, m.chain[i].get()) != 1) fail("its chain cannot be used");
  if (SSL_CTX_use_PrivateKey(ctx, m.key.get()) != 1 || SSL_CTX_check_private_key(ctx) != 1)
    throw InputError("TLS key " + files.key + ": cannot be used with " + files.cert + " (" + openssl_reason() + ")");
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  for (const auto& ca : m.authorities)
    if (X509_STORE_add_cert(store, ca.get()) != 1) {
      const std::string why = openssl_reason();
      if (why.find("already in hash table") == std::string::npos)
        throw InputError("TLS CA " + files.ca + ": cannot be used (" + why + ")");
    }
}

}  // namespace

class TlsContext {
 public:
  explicit TlsContext(std::shared_ptr<JobSocketFactory> factory) : factory_(std::move(factory)) {}
  JobSocketFactory& factory() const { return *factory_; }
  std::shared_ptr<JobSocketFactory> shared_factory() const { return factory_; }

 private:
  std::shared_ptr<JobSocketFactory> factory_;
};

Tls load_tls(const TlsFiles& files) {
  if (files.empty()) return nullptr;
  PW_INPUT_CHECK(!files.cert.empty() && !files.key.empty() && !files.ca.empty(),
                 "TLS needs a certificate, its key and the job's CA; got only some of them");
  route_thrift_output_to_log();
  static std::once_flag once;
  // OpenSSL 3 initialises itself; Thrift must not clean it up when its last factory goes.
  std::call_once(once, [] { transport::TSSLSocketFactory::setManualOpenSSLInitialization(true); });
  ERR_clear_error();
  const Material m = read_material(files);
  check_signed_by_ca(m, files);
  auto factory = std::make_shared<JobSocketFactory>();
  install(factory->ctx(), m, files);
  // The server requires a client certificate; both ends verify the peer's chain against the CA.
  factory->authenticate(true);
  return std::make_shared<const TlsContext>(std::move(factory));
}

std::shared_ptr<transport::TSocket> make_client_socket(const Tls& tls, const HostPort& address,
                                                       std::shared_ptr<TConfiguration> config) {
  if (!tls) return std::make_shared<transport::TSocket>(address.host, address.port, std::move(config));
  return tls->factory().client(address, std::move(config));
}

void open_client_socket(transport::TSocket& socket, const HostPort& address, std::chrono::milliseconds timeout) {
  // Thrift reads a timeout of 0 as "wait forever".
  const int ms = static_cast<int>(std::clamp<std::chrono::milliseconds::rep>(timeout.count(), 1, INT_MAX));
  socket.setConnTimeout(ms);
  socket.setRecvTimeout(ms);
  socket.setSendTimeout(ms);
  socket.open();
  if (auto* tls = dynamic_cast<JobTlsSocket*>(&socket)) {
    try {
      tls->handshake(address);
    } catch (...) {
      try {
        socket.close();
      } catch (...) {
      }
      throw;
    }
  }
}

std::shared_ptr<transport::TServerSocket> make_server_socket(const Tls& tls, const HostPort& bind) {
  if (!tls) return std::make_shared<transport::TServerSocket>(bind.host, bind.port);
  return std::make_shared<transport::TSSLServerSocket>(bind.host, bind.port, tls->shared_factory());
}

std::string refused_handshake(const std::exception& e) {
  if (dynamic_cast<const transport::TSSLException*>(&e) == nullptr) return {};
  // Thrift's handshake and its certificate checks; not a later read or write.
  const std::string what = e.what();
  bool handshake = false;
  for (const char* prefix : {"SSL_accept:", "SSL_get_verify_result", "authorize:"})
    handshake = handshake || what.rfind(prefix, 0) == 0;
  if (!handshake) return {};
  ERR_clear_error();
  return "TLS handshake failed: " + plain_reason(e.what());
}

}  // namespace pw::rpc
