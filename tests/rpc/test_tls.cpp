// Mutual TLS on the job's Thrift links (rpc/tls.h), on loopback with a CA the test makes: bad files
// are refused naming them; stage transports and the rendezvous work over TLS; a peer without a
// certificate of the job's CA (a foreign CA's, or none) and a peer without TLS are refused in one
// line, by the server (one logged line) and by the client (one error naming the address).
#include <algorithm>
#include <chrono>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>
#include <thrift/transport/TSSLSocket.h>
#include <thrift/transport/TTransportException.h>

#include "pipewright/log.h"
#include "rpc/job_token.h"
#include "rpc/rendezvous_client.h"
#include "rpc/rendezvous_server.h"
#include "rpc/tls.h"
#include "rpc_test_world.h"
#include "tests/support/test_pki.h"

using namespace pw;
using namespace std::chrono_literals;
using test::error_of;
using test::in_ms;

namespace {

namespace transport = apache::thrift::transport;

const std::string kToken = "tls-test-token-0123";

bool one_line(const std::string& text) { return text.find('\n') == std::string::npos; }

// The Warn and Error lines the library logs while it lives.
class CapturedLog {
 public:
  CapturedLog() {
    set_log_sink([this](LogLevel level, std::string_view message) {
      if (level != LogLevel::Warn && level != LogLevel::Error) return;
      std::lock_guard lock(mutex_);
      lines_.emplace_back(message);
    });
  }
  ~CapturedLog() { set_log_sink({}); }
  std::vector<std::string> lines_with(const std::string& part) const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> out;
    for (const auto& line : lines_)
      if (line.find(part) != std::string::npos) out.push_back(line);
    return out;
  }
  // Waits (at most `limit`) until `count` lines with `part` were logged (the server logs from its
  // own threads), then a moment more for any that should not come.
  std::vector<std::string> wait_for(const std::string& part, std::size_t count = 1,
                                    std::chrono::milliseconds limit = 10000ms) const {
    const auto until = std::chrono::steady_clock::now() + limit;
    while (lines_with(part).size() < count && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(10ms);
    std::this_thread::sleep_for(200ms);
    return lines_with(part);
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> lines_;
};

struct Contexts {
  test::TestPki pki{"rpc"};
  rpc::Tls job = rpc::load_tls({pki.cert(), pki.key(), pki.ca()});
  // Another CA's host, trusting only its own CA.
  rpc::Tls stranger = rpc::load_tls({pki.stranger_cert(), pki.stranger_key(), pki.foreign_ca()});
};

// A TLS client made with Thrift's own factory, outside load_tls's checks: with a certificate of
// another CA, or with none; it trusts the job's CA and checks no names.
class RawTlsClient {
 public:
  RawTlsClient(const test::TestPki& pki, bool with_stranger_cert) {
    factory_ = std::make_shared<transport::TSSLSocketFactory>();
    if (with_stranger_cert) {
      factory_->loadCertificate(pki.stranger_cert().c_str());
      factory_->loadPrivateKey(pki.stranger_key().c_str());
    }
    factory_->loadTrustedCertificates(pki.ca().c_str());
    factory_->authenticate(true);
    factory_->access(std::make_shared<AllowAddresses>());
  }
  // What connecting and writing a few bytes meets ("" when nothing failed).
  std::string try_talking_to(const rpc::HostPort& server) {
    auto socket = factory_->createSocket(server.host, server.port);
    socket->setRecvTimeout(10000);
    socket->setSendTimeout(10000);
    try {
      socket->open();
      const std::uint8_t bytes[8] = {};
      socket->write(bytes, sizeof bytes);
      socket->flush();
      std::uint8_t answer[4];
      socket->read(answer, sizeof answer);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  }

 private:
  struct AllowAddresses : transport::AccessManager {
    Decision verify(const sockaddr_storage&) noexcept override { return ALLOW; }
  };
  std::shared_ptr<transport::TSSLSocketFactory> factory_;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(tls)

BOOST_AUTO_TEST_CASE(bad_files_are_refused_in_one_line_naming_the_file) {
  test::TestPki pki("files");
  {
    std::ofstream(pki.file("junk.pem")) << "not a certificate\n";
  }
  const std::string missing = pki.file("nowhere.pem");
  const struct {
    rpc::TlsFiles files;
    std::string file, says;
  } cases[] = {
      {{missing, pki.key(), pki.ca()}, missing, "no such file"},
      {{pki.file("junk.pem"), pki.key(), pki.ca()}, pki.file("junk.pem"), "no PEM certificate"},
      {{pki.cert(), pki.file("junk.pem"), pki.ca()}, pki.file("junk.pem"), "not an unencrypted PEM private key"},
      {{pki.cert(), pki.key(), pki.file("junk.pem")}, pki.file("junk.pem"), "no PEM certificate"},
      {{pki.cert(), pki.stranger_key(), pki.ca()}, pki.stranger_key(), "not the key of the certificate"},
      {{pki.stranger_cert(), pki.stranger_key(), pki.ca()}, pki.stranger_cert(), "not valid under the CA"},
      {{pki.cert(), "", ""}, "", "needs a certificate, its key and the job's CA"},
  };
  for (const auto& c : cases) {
    BOOST_TEST_CONTEXT(c.says) {
      std::string message;
      try {
        rpc::load_tls(c.files);
      } catch (const InputError& e) {
        message = e.what();
      }
      BOOST_TEST(message.find(c.says) != std::string::npos, message);
      BOOST_TEST(message.find(c.file) != std::string::npos, message);
      BOOST_TEST(one_line(message), message);
    }
  }
  BOOST_TEST(rpc::load_tls({}) == nullptr);   // no files: plain TCP
  BOOST_TEST(rpc::load_tls({pki.cert(), pki.key(), pki.ca()}) != nullptr);
}

BOOST_AUTO_TEST_CASE(stage_transports_carry_tensors_bitwise_over_tls) {
  Contexts tls;
  const std::vector<std::string> any_port(2, "127.0.0.1:0");
  std::vector<std::unique_ptr<rpc::ThriftTransport>> world;
  for (int r = 0; r < 2; ++r)
    world.push_back(std::make_unique<rpc::ThriftTransport>(r, 2, any_port, kToken, rpc::ThriftTransportLimits{}, tls.job));
  for (auto& self : world)
    for (int peer = 0; peer < 2; ++peer) self->set_peer_address(peer, world[peer]->address());
  // A small frame (answered one by one) and large ones (pipelined, read straight into tensors).
  int mb = 0;
  for (const kernels::Shape& shape : {kernels::Shape{3, 5}, kernels::Shape{512, 1024}, kernels::Shape{1 << 20}}) {
    const auto activation = test::byte_pattern(shape, kernels::DType::F32, static_cast<unsigned>(mb));
    const rpc::Tag forward{1, mb, rpc::PayloadKind::Activation, 1};
    world[0]->send(1, forward, activation, in_ms(20000));
    BOOST_TEST(test::same_bits(world[1]->recv(0, forward, in_ms(20000)), activation));
    const rpc::Tag backward{1, mb, rpc::PayloadKind::Gradient, 0};
    world[1]->send(0, backward, activation, in_ms(20000));
    BOOST_TEST(test::same_bits(world[0]->recv(1, backward, in_ms(20000)), activation));
    ++mb;
  }
}

BOOST_AUTO_TEST_CASE(the_rendezvous_registers_stores_and_beats_over_tls) {
  Contexts tls;
  rpc::RendezvousServer server({"127.0.0.1", 0}, rpc::RendezvousConfig{1, 1, kToken, 5000ms, tls.job});
  rpc::RendezvousClient client(server.address(), kToken, 0, tls.job);
  const auto layout = client.register_rank("127.0.0.1:1234", in_ms(20000));
  BOOST_TEST(layout.ranks.size() == 1u);
  client.set("answer", "42");
  BOOST_TEST(client.get("answer", in_ms(20000)) == "42");
  std::string failure;
  {
    rpc::Heartbeat beat(server.address(), kToken, 0, 50ms, 5000ms, [&](const std::string& why) { failure = why; },
                        tls.job);
    std::this_thread::sleep_for(300ms);
    beat.stop();      // stops beating, keeps its connection open
    client.leave();   // before that connection closes, which would count as a lost rank
  }
  BOOST_TEST(failure.empty(), failure);
  BOOST_TEST(server.failure().empty(), server.failure());
}

BOOST_AUTO_TEST_CASE(a_client_of_another_ca_is_refused_in_one_line_naming_the_address) {
  Contexts tls;
  CapturedLog log;
  rpc::RendezvousServer server({"127.0.0.1", 0}, rpc::RendezvousConfig{2, 2, kToken, 5000ms, tls.job});
  // The stranger trusts only its own CA: it refuses the server's certificate itself.
  rpc::RendezvousClient stranger(server.address(), kToken, 1, tls.stranger);
  std::string message;
  try {
    stranger.register_rank("127.0.0.1:1", in_ms(30000));
  } catch (const rpc::TlsError& e) {   // not retried until the deadline: certificates do not change
    message = e.what();
  }
  BOOST_TEST(message.find("rendezvous at " + server.address().str()) != std::string::npos, message);
  BOOST_TEST(message.find("TLS handshake failed: certificate verify failed") != std::string::npos, message);
  BOOST_TEST(one_line(message), message);

  // One that trusts the job's CA but shows a certificate of another: the server refuses it.
  RawTlsClient foreign(tls.pki, /*with_stranger_cert=*/true);
  const std::string client_saw = foreign.try_talking_to(server.address());
  BOOST_TEST(client_saw.find("alert") != std::string::npos, client_saw);
  const auto refused = log.wait_for("refused a connection from 127.0.0.1:", 2);
  BOOST_REQUIRE_EQUAL(refused.size(), 2u);   // the stranger's and this one's: one line each
  BOOST_TEST(refused[1].find("TLS handshake failed") != std::string::npos, refused[1]);
  BOOST_TEST(one_line(refused[1]), refused[1]);
}

BOOST_AUTO_TEST_CASE(a_client_without_a_certificate_is_refused) {
  Contexts tls;
  CapturedLog log;
  rpc::RendezvousServer server({"127.0.0.1", 0}, rpc::RendezvousConfig{1, 1, kToken, 5000ms, tls.job});
  RawTlsClient anonymous(tls.pki, /*with_stranger_cert=*/false);
  const std::string client_saw = anonymous.try_talking_to(server.address());
  BOOST_TEST(client_saw.find("alert") != std::string::npos, client_saw);
  const auto refused = log.wait_for("refused a connection from 127.0.0.1:");
  BOOST_REQUIRE_EQUAL(refused.size(), 1u);
  BOOST_TEST(refused[0].find("TLS handshake failed") != std::string::npos, refused[0]);
  // The server still serves the job.
  rpc::RendezvousClient member(server.address(), kToken, 0, tls.job);
  BOOST_TEST(member.register_rank("127.0.0.1:1", in_ms(20000)).ranks.size() == 1u);
}

BOOST_AUTO_TEST_CASE(a_plain_client_of_a_tls_server_is_refused_before_its_deadline) {
  Contexts tls;
  CapturedLog log;
  rpc::RendezvousServer server({"127.0.0.1", 0}, rpc::RendezvousConfig{1, 1, kToken, 5000ms, tls.job});
  rpc::RendezvousClient plain(server.address(), kToken, 0);
  // Refused, not left waiting: the error comes from the closed connection, not the deadline.
  const std::string message = error_of([&] { plain.register_rank("127.0.0.1:1", in_ms(120000)); });
  BOOST_TEST(message.find("lost the rendezvous service") != std::string::npos, message);
  const auto refused = log.wait_for("refused a connection from 127.0.0.1:");
  BOOST_REQUIRE_EQUAL(refused.size(), 1u);
  BOOST_TEST(refused[0].find("TLS handshake failed") != std::string::npos, refused[0]);
}

BOOST_AUTO_TEST_CASE(a_tls_client_of_a_plain_server_says_so_in_one_line) {
  Contexts tls;
  rpc::RendezvousServer plain({"127.0.0.1", 0}, rpc::RendezvousConfig{1, 1, kToken, 5000ms});
  rpc::RendezvousClient client(plain.address(), kToken, 0, tls.job);
  std::string message;
  try {
    client.register_rank("127.0.0.1:1", in_ms(30000));
  } catch (const rpc::TlsError& e) {
    message = e.what();
  }
  BOOST_TEST(message.find(plain.address().str() + " (registering): TLS handshake failed") != std::string::npos, message);
  BOOST_TEST(message.find("without TLS?") != std::string::npos, message);
  BOOST_TEST(one_line(message), message);
}

BOOST_AUTO_TEST_SUITE_END()
