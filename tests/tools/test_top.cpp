// The metrics endpoint (train --metrics-port) and `pipewright top`: the exposition a registry
// renders parses back to the same values; a running job answers GET /metrics in Prometheus' text
// format with per-stage and per-rank series whose step count grows, 404 elsewhere; top draws it.
#include <algorithm>
#include <fstream>
#include <chrono>
#include <cmath>
#include <optional>
#include <regex>
#include <thread>

#include <boost/asio/ip/tcp.hpp>
#include <boost/test/unit_test.hpp>

#include "core/error.h"
#include "tests/tools/background_command.h"
#include "tests/support/test_pki.h"
#include "tests/tools/cli_runner.h"
#include "tools/top_view.h"
#include "train/monitor/metrics_registry.h"
#include "train/monitor/metrics_server.h"

using namespace std::chrono_literals;
namespace monitor = pw::monitor;
namespace tools = pw::tools;

namespace {

double value(const std::vector<tools::MetricSample>& samples, const std::string& name,
             const std::map<std::string, std::string>& labels = {}) {
  for (const auto& s : samples)
    if (s.name == name && s.labels == labels) return s.value;
  BOOST_FAIL("no sample " << name);
  return 0.0;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(top)

BOOST_AUTO_TEST_CASE(a_registrys_exposition_parses_back_to_its_values) {
  monitor::MetricsRegistry r;
  r.describe("demo_total", monitor::MetricType::Counter, "a help text\nwith a newline and a \\");
  r.describe("demo_share", monitor::MetricType::Gauge, "per stage");
  r.set("demo_total", 42);
  r.set("demo_share", {{"stage", "0"}}, 0.25);
  r.set("demo_share", {{"stage", "1"}, {"note", "a \"quoted\"\nvalue\\"}}, std::nan(""));
  r.set("demo_share", {{"stage", "2"}}, -INFINITY);
  r.set("demo_share", {{"stage", "3"}}, 0.1 + 0.2);   // the shortest exact decimal, not rounded
  const std::string text = r.exposition();
  BOOST_TEST(text.find("# TYPE demo_total counter\n") != std::string::npos, text);
  BOOST_TEST(text.find("# HELP demo_total a help text\\nwith a newline and a \\\\\n") != std::string::npos, text);
  BOOST_TEST(text.find("demo_share{stage=\"2\"} -Inf\n") != std::string::npos, text);
  const auto samples = tools::parse_exposition(text);
  BOOST_TEST(samples.size() == 5u);
  BOOST_TEST(value(samples, "demo_total") == 42.0);
  BOOST_TEST(value(samples, "demo_share", {{"stage", "0"}}) == 0.25);
  BOOST_TEST(std::isnan(value(samples, "demo_share", {{"stage", "1"}, {"note", "a \"quoted\"\nvalue\\"}})));
  BOOST_TEST(value(samples, "demo_share", {{"stage", "3"}}) == 0.1 + 0.2);
  BOOST_CHECK_THROW(monitor::MetricsRegistry().set("undescribed", 1.0), pw::Error);
}

BOOST_AUTO_TEST_CASE(an_endpoint_with_a_token_answers_only_requests_that_carry_it) {
  monitor::MetricsRegistry r;
  r.describe("x", monitor::MetricType::Gauge, "x");
  r.set("x", 1.0);
  monitor::MetricsServer server("127.0.0.1", 0, r, "the-jobs-token-0123456789");
  const auto refusal = [&](const std::string& token) {
    try {
      monitor::http_get("127.0.0.1", server.port(), "/metrics", 10000, token);
    } catch (const pw::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  BOOST_TEST(refusal("").find("answered 401") != std::string::npos);
  BOOST_TEST(refusal("the-jobs-token-012345678X").find("answered 401") != std::string::npos);
  BOOST_TEST(refusal("the-jobs-token-0123456789").empty());
  BOOST_TEST(monitor::http_get("127.0.0.1", server.port(), "/metrics", 10000, "the-jobs-token-0123456789") ==
             r.exposition());
}

BOOST_AUTO_TEST_CASE(with_a_certificate_the_endpoint_serves_https_only) {
  const pw::test::TestPki pki("metrics");
  monitor::MetricsRegistry r;
  r.describe("x", monitor::MetricType::Gauge, "x");
  r.set("x", 1.0);
  monitor::MetricsServer server("127.0.0.1", 0, r, "the-jobs-token-0123456789", {pki.cert(), pki.key()});
  BOOST_TEST(server.url().rfind("https://127.0.0.1:", 0) == 0u, server.url());
  const auto get = [&](const std::string& token, const std::string& ca) {
    return monitor::http_get("127.0.0.1", server.port(), "/metrics", 10000, token, ca);
  };
  BOOST_TEST(get("the-jobs-token-0123456789", pki.ca()) == r.exposition());
  const auto failure = [&](const std::string& token, const std::string& ca) {
    try {
      get(token, ca);
    } catch (const pw::InputError& e) {
      return "input: " + std::string(e.what());
    } catch (const pw::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  // The token is still asked for, now inside TLS.
  BOOST_TEST(failure("", pki.ca()).find("answered 401") != std::string::npos);
  // Plain HTTP gets nothing: the server drops what is not a TLS handshake at once (not at the
  // client's deadline, which would say "no answer within").
  const auto plain = failure("the-jobs-token-0123456789", "");
  BOOST_TEST((!plain.empty() && plain.rfind("input: ", 0) != 0u), plain);
  BOOST_TEST(plain.find("no answer within") == std::string::npos, plain);
  // A client that connects and sends nothing holds the one thread until its deadline only.
  {
    boost::asio::io_context io;
    boost::asio::ip::tcp::socket silent(io);
    silent.connect({boost::asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(server.port())});
    BOOST_TEST(monitor::http_get("127.0.0.1", server.port(), "/metrics", 60000, "the-jobs-token-0123456789", pki.ca()) ==
               r.exposition());
  }
  // A server certificate the given CA did not sign is refused, in one line naming the CA.
  const auto foreign = failure("the-jobs-token-0123456789", pki.foreign_ca());
  BOOST_TEST(foreign.find("input: https://127.0.0.1:") == 0u, foreign);
  BOOST_TEST(foreign.find("TLS handshake failed") != std::string::npos, foreign);
  BOOST_TEST(foreign.find(pki.foreign_ca()) != std::string::npos, foreign);
  // The server serves the next client after those.
  BOOST_TEST(get("the-jobs-token-0123456789", pki.ca()) == r.exposition());
  // A key of another certificate, or half a pair, is refused before anything listens.
  try {
    monitor::MetricsServer wrong("127.0.0.1", 0, r, "", {pki.cert(), pki.stranger_key()});
    BOOST_FAIL("a key of another certificate was taken");
  } catch (const pw::InputError& e) {
    BOOST_TEST(std::string(e.what()).find("key " + pki.stranger_key() + ": cannot use it with certificate " + pki.cert()) !=
                   std::string::npos,
               e.what());
  }
  BOOST_CHECK_THROW(monitor::MetricsServer("127.0.0.1", 0, r, "", {pki.cert(), ""}), pw::InputError);
}

BOOST_AUTO_TEST_CASE(a_job_with_tls_serves_https_and_top_reads_it_with_the_jobs_ca) {
  pw::test::ScratchDir dir("top-tls");
  const pw::test::TestPki pki("top");
  pw::test::BackgroundCommand job(pw::test::pipewright_binary() +
                                      " train --model seed-cnn --dataset synthetic --synthetic-size 512 --threads 1 "
                                      "--batch-size 16 --steps 1000000 --metrics-port 0 --log-every 1000000 " +
                                      pki.flags(),
                                  dir.file("job.log"));
  BOOST_REQUIRE_MESSAGE(job.wait_for_output("/metrics", 120s), job.output());
  std::smatch m;
  const std::string out = job.output();
  BOOST_REQUIRE_MESSAGE(std::regex_search(out, m, std::regex(R"(metrics: https://([0-9.]+):([0-9]+)/metrics)")), out);
  const std::string address = std::string(m[1]) + ":" + std::string(m[2]);
  const auto plain = pw::test::run_pipewright("top --once " + address);
  BOOST_TEST(plain.status == 2, plain.output);
  BOOST_TEST(plain.output.find("give top --tls-ca with the job's CA") != std::string::npos, plain.output);
  const auto top = pw::test::run_pipewright("top --once --tls-ca " + pki.ca() + " " + address);
  BOOST_TEST(top.status == 0, top.output);
  BOOST_TEST(top.output.find("pipewright top  " + address + "  step ") == 0u, top.output);
  const auto from_env = pw::test::run_command("env PW_TLS_CA=" + pki.ca() + " " + pw::test::pipewright_binary() +
                                              " top --once " + address);
  BOOST_TEST(from_env.status == 0, from_env.output);
}

BOOST_AUTO_TEST_CASE(a_malformed_page_is_named_by_line) {
  try {
    tools::parse_exposition("# HELP x y\nx 1\nx{a=\"b\"} lots\n");
    BOOST_FAIL("expected an InputError");
  } catch (const pw::InputError& e) {
    BOOST_TEST(std::string(e.what()).find("metrics line 3: 'lots' is not a number") != std::string::npos, e.what());
  }
  BOOST_CHECK_THROW(tools::parse_exposition("x{a=\"b} 1\n"), pw::InputError);
}

BOOST_AUTO_TEST_CASE(a_running_job_serves_its_figures_and_top_draws_them) {
  pw::test::ScratchDir dir("top");
  // Long enough to outlast the test, which stops it.
  pw::test::BackgroundCommand job(
      pw::test::pipewright_binary() +
          " train --model seed-cnn --dataset synthetic --synthetic-size 2048 --threads 1 --batch-size 16 "
          "--stages 2 --replicas 2 --steps 1000000 --metrics-port 0 --log-every 1000000",
      dir.file("job.log"));
  BOOST_REQUIRE_MESSAGE(job.wait_for_output("/metrics", 120s), job.output());
  std::smatch m;
  const std::string out = job.output();
  BOOST_REQUIRE(std::regex_search(out, m, std::regex(R"(metrics: http://([0-9.]+):([0-9]+)/metrics)")));
  const std::string host = m[1];
  const int port = std::stoi(m[2]);

  // The step count grows (an eventual value: polled until it does, within a deadline).
  const auto scrape = [&] { return tools::parse_exposition(monitor::http_get(host, port, "/metrics", 10000)); };
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  auto first = scrape();
  while (value(first, "pipewright_steps_total") < 1 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(100ms);
    first = scrape();
  }
  BOOST_REQUIRE(value(first, "pipewright_steps_total") >= 1);
  auto later = scrape();
  while (value(later, "pipewright_steps_total") <= value(first, "pipewright_steps_total") &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(200ms);
    later = scrape();
  }
  BOOST_TEST(value(later, "pipewright_steps_total") > value(first, "pipewright_steps_total"));
  BOOST_TEST(value(later, "pipewright_total_steps") == 1000000.0);
  for (int s = 0; s < 2; ++s) {
    const std::map<std::string, std::string> stage{{"stage", std::to_string(s)}};
    const double busy = value(later, "pipewright_stage_busy_share", stage);
    const double comm = value(later, "pipewright_stage_communication_share", stage);
    const double bubble = value(later, "pipewright_stage_bubble_share", stage);
    BOOST_TEST(busy + comm + bubble == 1.0, boost::test_tools::tolerance(1e-9));
    BOOST_TEST((busy > 0 && busy < 1));   // measured: a stage of two computes part of the step
    BOOST_TEST(comm > 0);                 // and sends to its neighbour
    BOOST_TEST(value(later, "pipewright_stage_peak_memory_bytes", stage) > 0);
  }
  for (int rank = 0; rank < 4; ++rank)
    BOOST_TEST(value(later, "pipewright_rank_own_seconds",
                     {{"rank", std::to_string(rank)}, {"stage", std::to_string(rank % 2)}, {"replica", std::to_string(rank / 2)}}) >= 0);
  BOOST_TEST(std::isfinite(value(later, "pipewright_loss")));

  try {
    monitor::http_get(host, port, "/other", 10000);
    BOOST_FAIL("expected a 404");
  } catch (const pw::Error& e) {
    BOOST_TEST(std::string(e.what()).find("answered 404") != std::string::npos, e.what());
  }

  const auto top = pw::test::run_pipewright("top --once " + host + ":" + std::to_string(port));
  BOOST_TEST_INFO(top.output);
  BOOST_TEST(top.status == 0);
  BOOST_TEST(top.output.find("pipewright top  " + host + ":" + std::to_string(port) + "  step ") == 0u);
  BOOST_TEST(std::regex_search(top.output, std::regex(R"(\n0 +\[#*\.*\] +[0-9]+%)")));
  BOOST_TEST(std::regex_search(top.output, std::regex(R"(\n1 +\[#*\.*\] +[0-9]+%)")));
  BOOST_TEST(top.output.find("longest own time: rank ") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(top_without_a_job_and_a_port_in_use_are_one_line_errors) {
  // A port nobody listens on: bound here, so that nothing else takes it while the test runs.
  monitor::MetricsRegistry r;
  r.describe("x", monitor::MetricType::Gauge, "x");
  std::optional<monitor::MetricsServer> taken(std::in_place, "127.0.0.1", 0, r);
  const int port = taken->port();
  const auto busy = pw::test::run_pipewright("train --model seed-cnn --dataset synthetic --synthetic-size 64 "
                                             "--threads 1 --batch-size 16 --steps 1 --metrics-port " +
                                             std::to_string(port));
  BOOST_TEST(busy.status == 2, busy.output);
  BOOST_TEST(busy.output.find("cannot listen there") != std::string::npos, busy.output);
  taken.reset();
  const auto bad_address = pw::test::run_pipewright("top --once nohost");
  BOOST_TEST(bad_address.status == 2, bad_address.output);
  BOOST_TEST(bad_address.output.find("top: ") != std::string::npos, bad_address.output);
  const auto none = pw::test::run_pipewright("top --once 127.0.0.1:" + std::to_string(port));
  BOOST_TEST(none.status == 2, none.output);
  BOOST_TEST(none.output.find("is a job running with --metrics-port?") != std::string::npos, none.output);
  // A CA file that is not there, or not a certificate: one line each.
  const auto missing = pw::test::run_pipewright("top --once --tls-ca /nonexistent/ca.pem 127.0.0.1:" + std::to_string(port));
  BOOST_TEST(missing.status == 2, missing.output);
  BOOST_TEST(missing.output.find("--tls-ca") != std::string::npos, missing.output);
  BOOST_TEST(std::count(missing.output.begin(), missing.output.end(), '\n') == 1, missing.output);
  pw::test::ScratchDir dir("top-bad-ca");
  std::ofstream(dir.file("ca.pem")) << "not a certificate\n";
  const auto not_cert = pw::test::run_pipewright("top --once --tls-ca " + dir.file("ca.pem") + " 127.0.0.1:" + std::to_string(port));
  BOOST_TEST(not_cert.status == 2, not_cert.output);
  BOOST_TEST(not_cert.output.find("CA certificate " + dir.file("ca.pem") + ": cannot use it") != std::string::npos, not_cert.output);
  BOOST_TEST(std::count(not_cert.output.begin(), not_cert.output.end(), '\n') == 1, not_cert.output);
}

BOOST_AUTO_TEST_SUITE_END()
