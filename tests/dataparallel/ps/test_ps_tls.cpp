// Parameter servers under mutual TLS (rpc/tls.h), on loopback with a CA the test makes: rows go
// and come back over TLS; a worker of another CA is refused in one line naming the shard and its
// address; a connection that never starts its handshake is closed at the gate's deadline.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <boost/test/unit_test.hpp>

#include "dataparallel/ps/client.h"
#include "dataparallel/ps/server.h"
#include "rpc/tls.h"
#include "tests/support/test_pki.h"

using namespace pw;
using namespace std::chrono_literals;

namespace {

const std::string kToken = "ps-tls-test-token";

dp::TableConfig table() {
  dp::TableConfig c;
  c.name = "emb";
  c.dim = 4;
  c.optimizer = dp::SparseOptimizerKind::Sgd;
  c.lr = 1.0;
  c.init_seed = 7;
  c.init_scale = 0.5;
  return c;
}

dp::PsShardConfig shard() {
  dp::PsShardConfig c;
  c.mode = dp::UpdateMode::Async;
  return c;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ps_tls)

BOOST_AUTO_TEST_CASE(pull_and_push_over_tls) {
  test::TestPki pki("ps");
  const auto tls = rpc::load_tls({pki.cert(), pki.key(), pki.ca()});
  dp::PsServer server({"127.0.0.1", 0}, shard(), kToken, rpc::GateLimits{}, tls);
  dp::PsClient client({server.address()}, kToken, 0, 20000ms, tls);
  client.create_table(table());
  const std::vector<std::int64_t> keys{1, 5, 99};
  const auto before = client.pull("emb", 4, keys, 0, -1);
  client.push("emb", 4, keys, std::vector<float>(keys.size() * 4, 0.5f), 0);
  const auto after = client.pull("emb", 4, keys, 1, -1);
  BOOST_REQUIRE_EQUAL(after.size(), before.size());
  for (std::size_t i = 0; i < after.size(); ++i) BOOST_TEST(after[i] == before[i] - 0.5f);
}

BOOST_AUTO_TEST_CASE(a_worker_of_another_ca_is_refused_naming_the_shard) {
  test::TestPki pki("ps_refused");
  const auto job = rpc::load_tls({pki.cert(), pki.key(), pki.ca()});
  const auto stranger = rpc::load_tls({pki.stranger_cert(), pki.stranger_key(), pki.foreign_ca()});
  dp::PsServer server({"127.0.0.1", 0}, shard(), kToken, rpc::GateLimits{}, job);
  dp::PsClient client({server.address()}, kToken, 0, 30000ms, stranger);
  std::string message;
  try {
    client.create_table(table());
  } catch (const rpc::TlsError& e) {   // at once, not after the 30 s of retries a lost server gets
    message = e.what();
  }
  BOOST_TEST(message.find("parameter server shard 0 at " + server.address().str()) != std::string::npos, message);
  BOOST_TEST(message.find("TLS handshake failed: ") != std::string::npos, message);
  BOOST_TEST(message.find('\n') == std::string::npos, message);
  // A plain worker gets no rows either: its calls fail until its deadline.
  dp::PsClient plain({server.address()}, kToken, 0, 1000ms);
  BOOST_CHECK_THROW(plain.create_table(table()), Error);
}

BOOST_AUTO_TEST_CASE(a_connection_that_never_starts_its_handshake_is_closed_at_the_deadline) {
  test::TestPki pki("ps_silent");
  const auto tls = rpc::load_tls({pki.cert(), pki.key(), pki.ca()});
  dp::PsServer server({"127.0.0.1", 0}, shard(), kToken, rpc::GateLimits{300ms, 4}, tls);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(server.address().port));
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  BOOST_REQUIRE_EQUAL(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  timeval limit{30, 0};   // far past the gate's deadline: a hang fails the test instead of blocking it
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  char byte = 0;
  const auto got = ::recv(fd, &byte, 1, 0);
  ::close(fd);
  BOOST_TEST(got == 0, "the server should have closed the silent connection; recv gave " << got);
  // The job's workers still get in.
  dp::PsClient client({server.address()}, kToken, 0, 20000ms, tls);
  BOOST_CHECK_NO_THROW(client.create_table(table()));
}

BOOST_AUTO_TEST_SUITE_END()
