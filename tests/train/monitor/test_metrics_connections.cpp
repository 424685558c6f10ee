// The metrics endpoint serves its connections at once (issue 49): a dozen idle clients, each
// allowed 5 s for its request, used to delay a scrape by 12 x 5 s because the next connection was
// accepted only when the current one ended. Now a scrape behind them is answered at once, over HTTP
// and HTTPS; past 64 open connections the oldest idle one makes room; an idle client is still
// dropped at its deadline. The bounds below are generous (a loaded machine) yet far under 60 s.
#include <sys/socket.h>
#include <sys/time.h>

#include <cerrno>

#include <memory>
#include <string>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/test/unit_test.hpp>

#include "core/error.h"
#include "tests/support/test_pki.h"
#include "train/monitor/metrics_registry.h"
#include "train/monitor/metrics_server.h"

namespace monitor = pw::monitor;
using tcp = boost::asio::ip::tcp;

namespace {

// A deadline for a scrape, so that a regression fails instead of hanging. What shows the idle
// clients did not delay it is that they are still open once it is answered: an endpoint serving
// one connection at a time answers it only after closing each of them at its 5 s deadline.
constexpr int kScrapeMs = 120000;

struct Registry {
  monitor::MetricsRegistry r;
  Registry() {
    r.describe("pipewright_step", monitor::MetricType::Gauge, "step");
    r.set("pipewright_step", 7.0);
  }
};

// `count` clients that connect and send nothing.
struct IdleClients {
  boost::asio::io_context io;
  std::vector<std::unique_ptr<tcp::socket>> sockets;
  IdleClients(int port, int count) {
    for (int i = 0; i < count; ++i) {
      sockets.push_back(std::make_unique<tcp::socket>(io));
      sockets.back()->connect({boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)});
    }
  }
};

// Whether the server closed `socket` (end of file) within `seconds`, reading nothing.
bool closed_by_server(tcp::socket& socket, int seconds) {
  timeval timeout{seconds, 0};
  setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  char byte = 0;
  const auto got = ::recv(socket.native_handle(), &byte, 1, 0);
  return got == 0 || (got < 0 && errno == ECONNRESET);
}

// Whether `socket` is still open: nothing to read and no end of file, without waiting.
bool still_open(tcp::socket& socket) {
  char byte = 0;
  const auto got = ::recv(socket.native_handle(), &byte, 1, MSG_DONTWAIT);
  return got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(metrics_connections)

BOOST_AUTO_TEST_CASE(twelve_idle_clients_do_not_delay_an_http_scrape) {
  Registry reg;
  monitor::MetricsServer server("127.0.0.1", 0, reg.r);
  IdleClients idle(server.port(), 12);
  BOOST_TEST(monitor::http_get("127.0.0.1", server.port(), "/metrics", kScrapeMs) == reg.r.exposition());
  BOOST_TEST(still_open(*idle.sockets.back()));   // the scrape did not wait for it to be dropped
  // Several scrapes behind the same idle clients, one after another.
  for (int i = 0; i < 3; ++i)
    BOOST_TEST(monitor::http_get("127.0.0.1", server.port(), "/metrics", kScrapeMs) == reg.r.exposition());
}

BOOST_AUTO_TEST_CASE(twelve_idle_clients_do_not_delay_an_https_scrape) {
  const pw::test::TestPki pki("metrics_connections");
  Registry reg;
  monitor::MetricsServer server("127.0.0.1", 0, reg.r, "the-jobs-token-0123456789", {pki.cert(), pki.key()});
  IdleClients idle(server.port(), 12);   // TCP only: no handshake
  BOOST_TEST(monitor::http_get("127.0.0.1", server.port(), "/metrics", kScrapeMs, "the-jobs-token-0123456789",
                               pki.ca()) == reg.r.exposition());
  BOOST_TEST(still_open(*idle.sockets.back()));
}

BOOST_AUTO_TEST_CASE(past_the_cap_the_oldest_idle_client_makes_room) {
  Registry reg;
  monitor::MetricsServer server("127.0.0.1", 0, reg.r);
  IdleClients idle(server.port(), 80);
  BOOST_TEST(monitor::http_get("127.0.0.1", server.port(), "/metrics", kScrapeMs) == reg.r.exposition());
  // The first of them was closed to make room (well before its 5 s deadline would matter here, but
  // either way it is closed, not left open).
  BOOST_TEST(closed_by_server(*idle.sockets.front(), 30));
}

BOOST_AUTO_TEST_CASE(an_idle_client_is_still_dropped_at_its_deadline) {
  Registry reg;
  monitor::MetricsServer server("127.0.0.1", 0, reg.r);
  IdleClients idle(server.port(), 1);
  BOOST_TEST(closed_by_server(*idle.sockets.front(), 30));
  BOOST_TEST(monitor::http_get("127.0.0.1", server.port(), "/metrics", kScrapeMs) == reg.r.exposition());
}

BOOST_AUTO_TEST_SUITE_END()
