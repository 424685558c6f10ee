#include "train/monitor/metrics_server.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <thread>
#include <type_traits>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <openssl/ssl.h>

#include "core/error.h"
#include "core/secrets.h"
#include "core/log.h"

namespace pw::monitor {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = asio::ssl;
using tcp = asio::ip::tcp;
using TlsStream = beast::ssl_stream<beast::tcp_stream>;

namespace {

constexpr auto kRequestDeadline = std::chrono::seconds(5);
// Connections open at once; past it the oldest still waiting for its request is closed.
constexpr std::size_t kMaxConnections = 64;

http::response<http::string_body> answer(const http::request<http::string_body>& request,
                                         const MetricsRegistry& registry, const std::string& bearer_token) {
  http::response<http::string_body> response;
  response.version(request.version());
  response.set(http::field::server, "pipewright");
  response.keep_alive(false);
  const auto field = request[http::field::authorization];
  const std::string_view authorization(field.data(), field.size());
  if (!bearer_token.empty() && !secrets_equal(authorization, "Bearer " + bearer_token)) {
    response.result(http::status::unauthorized);
    response.set(http::field::www_authenticate, "Bearer");
    response.set(http::field::content_type, "text/plain");
    response.body() = "send the job's token: Authorization: Bearer <PW_JOB_TOKEN>\n";
  } else if (request.method() != http::verb::get && request.method() != http::verb::head) {
    response.result(http::status::method_not_allowed);
    response.set(http::field::content_type, "text/plain");
    response.body() = "only GET /metrics\n";
  } else if (request.target() != "/metrics") {
    response.result(http::status::not_found);
    response.set(http::field::content_type, "text/plain");
    response.body() = "pipewright serves /metrics only\n";
  } else {
    response.result(http::status::ok);
    response.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
    response.body() = request.method() == http::verb::head ? std::string() : registry.exposition();
  }
  response.prepare_payload();
  return response;
}

// TLS 1.2 or later, as the job's own links.
constexpr auto kTlsOptions = ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                             ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1;

// As the job's links (rpc/tls.cpp): no renegotiation (a client could make the one thread redo
// handshakes within its deadline) and no compression.
void harden(ssl::context& context) {
  context.set_options(kTlsOptions);
  SSL_CTX_set_options(context.native_handle(), SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
}

ssl::context server_context(const MetricsTls& tls) {
  PW_INPUT_CHECK(!tls.cert.empty() && !tls.key.empty(), "metrics endpoint: HTTPS needs both a certificate and its key (got "
                                                            << (tls.cert.empty() ? "a key" : "a certificate") << " only)");
  ssl::context context(ssl::context::tls_server);
  harden(context);
  beast::error_code ec;
  context.use_certificate_chain_file(tls.cert, ec);
  PW_INPUT_CHECK(!ec, "metrics endpoint: certificate " << tls.cert << ": cannot use it (" << ec.message() << ")");
  context.use_private_key_file(tls.key, ssl::context::pem, ec);
  PW_INPUT_CHECK(!ec, "metrics endpoint: key " << tls.key << ": cannot use it with certificate " << tls.cert << " ("
                                               << ec.message() << ")");
  PW_INPUT_CHECK(SSL_CTX_check_private_key(context.native_handle()) == 1,
                 "metrics endpoint: key " << tls.key << " does not belong to certificate " << tls.cert);
  return context;
}

}  // namespace

struct MetricsServer::State {
  std::optional<ssl::context> tls;   // set: HTTPS only. Before io: streams of pending handlers use it
  asio::io_context io;
  tcp::acceptor acceptor{io};
  std::string host;
  const MetricsRegistry* registry = nullptr;
  std::string bearer_token;
  // The connections open now, by when they were accepted (ids grow), each with what closes it.
  // Only the io thread touches them. `waiting`: still in its handshake or request, so closing it
  // loses no answer.
  struct Open {
    std::function<void()> close;
    bool waiting = true;
  };
  std::map<std::uint64_t, Open> open;
  std::uint64_t next_id = 0;
  std::thread thread;

  void accept() {
    try {
      if (tls) accept_into(std::make_shared<TlsStream>(io, *tls));
      else accept_into(std::make_shared<beast::tcp_stream>(io));
    } catch (const std::exception& e) {   // OpenSSL out of memory: try again shortly
      PW_LOG(Warn, "metrics endpoint: cannot take a connection: " << e.what());
      retry_accept();
    }
  }

  void retry_accept() {
    auto timer = std::make_shared<asio::steady_timer>(io, std::chrono::milliseconds(100));
    timer->async_wait([this, timer](beast::error_code) { accept(); });
  }

  // The next accept is armed as soon as a client is taken, so every connection is served at once
  // and a silent one costs only its own deadline. Past kMaxConnections the oldest one still waiting
  // for its request is closed (or, when every one is being answered, the newcomer).
  template <typename Stream>
  void accept_into(std::shared_ptr<Stream> stream) {
    acceptor.async_accept(beast::get_lowest_layer(*stream).socket(), [this, stream](beast::error_code ec) {
      if (ec) {
        if (ec == asio::error::operation_aborted) return;
        retry_accept();   // out of descriptors or the like: try again shortly rather than spin
        return;
      }
      accept();
      if (open.size() >= kMaxConnections && !close_oldest_waiting()) {
        close_socket(*stream);
        return;
      }
      const std::uint64_t id = next_id++;
      open.emplace(id, Open{[weak = std::weak_ptr<Stream>(stream)] {
                              if (const auto s = weak.lock()) close_socket(*s);
                            }});
      // One deadline for the handshake and the request together.
      beast::get_lowest_layer(*stream).expires_after(kRequestDeadline);
      if constexpr (std::is_same_v<Stream, TlsStream>) {
        stream->async_handshake(ssl::stream_base::server, [this, stream, id](beast::error_code e) {
          if (e) {   // not TLS, or gave up: dropped
            finish(id, *stream);
            return;
          }
          serve(id, stream);
        });
      } else {
        serve(id, stream);
      }
    });
  }

  template <typename Stream>
  static void close_socket(Stream& stream) {
    beast::error_code ignored;
    beast::get_lowest_layer(stream).socket().shutdown(tcp::socket::shutdown_both, ignored);
    beast::get_lowest_layer(stream).socket().close(ignored);
  }

  template <typename Stream>
  void finish(std::uint64_t id, Stream& stream) {
    close_socket(stream);
    open.erase(id);
  }

  bool close_oldest_waiting() {
    for (auto it = open.begin(); it != open.end(); ++it) {
      if (!it->second.waiting) continue;
      it->second.close();   // its pending read ends with an error and finds it gone
      open.erase(it);
      return true;
    }
    return false;
  }

  // One request per connection. The connection is closed after the answer (its length is in its
  // header), without waiting for a TLS client's close_notify.
  template <typename Stream>
  void serve(std::uint64_t id, std::shared_ptr<Stream> stream) {
    auto buffer = std::make_shared<beast::flat_buffer>();
    auto request = std::make_shared<http::request<http::string_body>>();
    http::async_read(*stream, *buffer, *request, [this, id, stream, buffer, request](beast::error_code ec, std::size_t) {
      const auto it = open.find(id);
      if (ec || it == open.end()) {
        finish(id, *stream);
        return;
      }
      it->second.waiting = false;
      auto response = std::make_shared<http::response<http::string_body>>(answer(*request, *registry, bearer_token));
      beast::get_lowest_layer(*stream).expires_after(kRequestDeadline);
      http::async_write(*stream, *response, [this, id, stream, response](beast::error_code, std::size_t) {
        finish(id, *stream);
      });
    });
  }
};

MetricsServer::MetricsServer(const std::string& host, int port, const MetricsRegistry& registry,
                             std::string bearer_token, const MetricsTls& tls)
    : state_(std::make_unique<State>()) {
  state_->host = host;
  state_->registry = &registry;
  state_->bearer_token = std::move(bearer_token);
  if (tls.enabled()) state_->tls.emplace(server_context(tls));
  beast::error_code ec;
  PW_INPUT_CHECK(port >= 0 && port <= 65535, "metrics port " << port << ": expected 0 (any free port) to 65535");
  // A host name (the advertised address may be one) resolves to its first address.
  tcp::resolver resolver(state_->io);
  const auto found = resolver.resolve(host, std::to_string(port), ec);
  PW_INPUT_CHECK(!ec && !found.empty(), "metrics address " << host << ": cannot resolve it (" << ec.message() << ")");
  const tcp::endpoint endpoint = found.begin()->endpoint();
  state_->acceptor.open(endpoint.protocol(), ec);
  if (!ec) state_->acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) state_->acceptor.bind(endpoint, ec);
  if (!ec) state_->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  PW_INPUT_CHECK(!ec, "metrics endpoint " << host << ":" << port << ": cannot listen there (" << ec.message() << ")");
  state_->accept();
  state_->thread = std::thread([s = state_.get()] {
    try {
      s->io.run();
    } catch (const std::exception& e) {
      PW_LOG(Warn, "metrics endpoint stopped: " << e.what());
    }
  });
}

MetricsServer::~MetricsServer() {
  asio::post(state_->io, [s = state_.get()] {
    beast::error_code ignored;
    s->acceptor.close(ignored);
  });
  state_->io.stop();
  if (state_->thread.joinable()) state_->thread.join();
}

int MetricsServer::port() const { return state_->acceptor.local_endpoint().port(); }

std::string MetricsServer::url() const {
  const bool v6 = state_->host.find(':') != std::string::npos;
  return std::string(state_->tls ? "https://" : "http://") + (v6 ? "[" + state_->host + "]" : state_->host) + ":" +
         std::to_string(port()) + "/metrics";
}

namespace {

// Connects `stream`'s lowest layer, runs `handshake` (nothing for plain HTTP), writes `request` and
// reads the answer, all before the deadline set on the stream; the first error is the result.
template <typename Stream, typename Handshake>
beast::error_code exchange(asio::io_context& io, Stream& stream, const tcp::resolver::results_type& endpoints,
                           const http::request<http::string_body>& request,
                           http::response<http::string_body>& response, Handshake handshake) {
  beast::error_code ec;
  beast::flat_buffer buffer;
  beast::get_lowest_layer(stream).async_connect(endpoints, [&](beast::error_code e, const tcp::endpoint&) {
    if (e) {
      ec = e;
      return;
    }
    handshake([&](beast::error_code e1) {
      if (e1) {
        ec = e1;
        return;
      }
      http::async_write(stream, request, [&](beast::error_code e2, std::size_t) {
        if (e2) {
          ec = e2;
          return;
        }
        http::async_read(stream, buffer, response, [&](beast::error_code e3, std::size_t) { ec = e3; });
      });
    });
  });
  io.run();
  return ec;
}

// http_get's request; `where` (the URL) names it in errors.
std::string get_from(const std::string& where, const std::string& host, int port, const std::string& path,
                     int timeout_ms, const std::string& bearer_token, const std::string& ca_file) {
  const bool https = !ca_file.empty();
  asio::io_context io;
  beast::error_code ec;
  tcp::resolver resolver(io);
  const auto endpoints = resolver.resolve(host, std::to_string(port), ec);
  PW_INPUT_CHECK(!ec, where << ": cannot resolve " << host << " (" << ec.message() << ")");
  http::request<http::string_body> request{http::verb::get, path, 11};
  request.set(http::field::host, host);
  request.set(http::field::user_agent, "pipewright");
  if (!bearer_token.empty()) request.set(http::field::authorization, "Bearer " + bearer_token);
  http::response<http::string_body> response;
  if (https) {
    ssl::context context(ssl::context::tls_client);
    harden(context);
    context.load_verify_file(ca_file, ec);
    PW_INPUT_CHECK(!ec, where << ": CA certificate " << ca_file << ": cannot use it (" << ec.message() << ")");
    context.set_verify_mode(ssl::verify_peer);
    TlsStream stream(io, context);
    // The server's name for SNI; an address is not sent (RFC 6066).
    beast::error_code not_address;
    asio::ip::make_address(host, not_address);
    if (not_address) SSL_set_tlsext_host_name(stream.native_handle(), host.c_str());
    beast::get_lowest_layer(stream).expires_after(std::chrono::milliseconds(timeout_ms));
    beast::error_code handshake_error;
    ec = exchange(io, stream, endpoints, request, response, [&](auto done) {
      stream.async_handshake(ssl::stream_base::client, [&, done](beast::error_code e) {
        handshake_error = e;
        done(e);
      });
    });
    // A certificate the CA did not sign, or a server that does not speak TLS (it closes, or
    // answers in plain text); a timeout stays a timeout.
    if (handshake_error && handshake_error != beast::error::timeout)
      throw InputError(where + ": TLS handshake failed: " + ec.message() +
                       " (is the server's certificate signed by " + ca_file + "? does it serve HTTPS?)");
  } else {
    beast::tcp_stream stream(io);
    beast::get_lowest_layer(stream).expires_after(std::chrono::milliseconds(timeout_ms));
    ec = exchange(io, stream, endpoints, request, response, [](auto done) { done(beast::error_code{}); });
  }
  if (ec == beast::error::timeout) throw TimeoutError(where + ": no answer within " + std::to_string(timeout_ms) + " ms");
  if (ec) throw Error(where + ": " + ec.message());
  if (response.result() != http::status::ok)
    throw Error(where + ": answered " + std::to_string(response.result_int()) + " " + std::string(response.reason()));
  return response.body();
}

}  // namespace

std::string http_get(const std::string& host, int port, const std::string& path, int timeout_ms,
                     const std::string& bearer_token, const std::string& ca_file) {
  const bool https = !ca_file.empty();
  const std::string where = std::string(https ? "https://" : "http://") + host + ":" + std::to_string(port) + path;
  try {
    return get_from(where, host, port, path, timeout_ms, bearer_token, ca_file);
  } catch (const boost::system::system_error& e) {   // OpenSSL or Asio refused to set a stream up
    throw Error(where + ": " + e.what());
  }
}

}  // namespace pw::monitor
