// Parameter servers: seeded rows and key sharding, the sparse optimizers, the service over
// loopback (sync, async and bounded staleness), bad requests, and recovery from the log.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/test/unit_test.hpp>

#include "dataparallel/ps/client.h"
#include "dataparallel/ps/limits.h"
#include "dataparallel/ps/server.h"
#include "dataparallel/ps/shard.h"
#include "rpc/transport.h"
#include "tests/dataparallel/ps/test_servers.h"

using namespace pw;
using namespace std::chrono_literals;
using pw::test::error_of;

namespace {

const std::string kToken = "ps-test-token-0123";

dp::TableConfig table(const std::string& name, int dim, dp::SparseOptimizerKind opt, double lr = 0.1) {
  dp::TableConfig c;
  c.name = name;
  c.dim = dim;
  c.optimizer = opt;
  c.lr = lr;
  c.init_seed = 42;
  c.init_scale = 0.5;
  return c;
}

std::vector<float> initial(const dp::TableConfig& c, std::int64_t key) {
  std::vector<float> row(static_cast<std::size_t>(c.dim));
  dp::initial_row(c, key, row.data());
  return row;
}

// Servers and one client per worker.
struct Servers : test::PsTestServers {
  Servers(int shards, int workers, dp::UpdateMode mode, std::size_t max_keys = std::size_t{1} << 22)
      : PsTestServers(shards, workers, mode, kToken, max_keys) {
    for (int w = 0; w < workers; ++w) clients.push_back(std::make_unique<dp::PsClient>(addresses, kToken, w, 5000ms));
  }
  std::vector<std::unique_ptr<dp::PsClient>> clients;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(parameter_server)

BOOST_AUTO_TEST_CASE(rows_are_seeded_by_key_and_keys_spread_over_shards) {
  const auto c = table("t", 8, dp::SparseOptimizerKind::Sgd);
  BOOST_TEST(initial(c, 7) == initial(c, 7));
  BOOST_TEST(initial(c, 7) != initial(c, 8));
  for (float v : initial(c, 123456789)) BOOST_TEST((v >= -0.5f && v <= 0.5f));
  std::vector<int> counts(4, 0);
  for (std::int64_t k = 0; k < 40000; ++k) ++counts[static_cast<std::size_t>(dp::shard_of(k, 4))];
  for (int n : counts) BOOST_TEST((n > 9000 && n < 11000), "shard holds " << n << " of 40000 consecutive keys");
}

BOOST_AUTO_TEST_CASE(sparse_optimizers_follow_their_formulas) {
  for (auto opt : {dp::SparseOptimizerKind::Sgd, dp::SparseOptimizerKind::Adagrad, dp::SparseOptimizerKind::Adam}) {
    BOOST_TEST_CONTEXT(dp::sparse_optimizer_name(opt)) {
      const auto c = table("t", 3, opt, 0.1);
      dp::ShardTable t(c);
      const std::int64_t key = 5;
      const auto start = initial(c, key);
      std::vector<double> w(start.begin(), start.end()), s1(3, 0.0), s2(3, 0.0);
      const float grads[2][3] = {{0.5f, -1.0f, 2.0f}, {0.25f, 0.5f, -0.75f}};
      for (int step = 0; step < 2; ++step) {
        t.apply(&key, 1, grads[step]);
        for (int j = 0; j < 3; ++j) {
          const double g = grads[step][j];
          if (opt == dp::SparseOptimizerKind::Sgd) w[j] -= 0.1 * g;
          if (opt == dp::SparseOptimizerKind::Adagrad) {
            s1[j] += g * g;
            w[j] -= 0.1 * g / (std::sqrt(s1[j]) + 1e-10);
          }
          if (opt == dp::SparseOptimizerKind::Adam) {
            s1[j] = 0.9 * s1[j] + 0.1 * g;
            s2[j] = 0.999 * s2[j] + 0.001 * g * g;
            const double mh = s1[j] / (1 - std::pow(0.9, step + 1)), vh = s2[j] / (1 - std::pow(0.999, step + 1));
            w[j] -= 0.1 * mh / (std::sqrt(vh) + 1e-8);
          }
        }
      }
      float got[3];
      t.pull(&key, 1, got);
      for (int j = 0; j < 3; ++j) BOOST_TEST(std::abs(got[j] - w[j]) <= 1e-5 * (1 + std::abs(w[j])));
    }
  }
}

// The optimizers are also compiled for AVX-512 (core/cpu_dispatch.h) and picked when the program
// loads; this plain loop, in the same operations and order, is what any x86-64 computes. Equal
// bits mean no CPU changes a row (a fused multiply-add in the AVX-512 twin once did).
BOOST_AUTO_TEST_CASE(sparse_optimizers_give_the_bits_of_plain_code_on_every_cpu) {
  constexpr int kDim = 64;
  for (auto opt : {dp::SparseOptimizerKind::Sgd, dp::SparseOptimizerKind::Adagrad, dp::SparseOptimizerKind::Adam}) {
    BOOST_TEST_CONTEXT(dp::sparse_optimizer_name(opt)) {
      const double lr = 0.037;
      const auto c = table("t", kDim, opt, lr);
      dp::ShardTable t(c);
      const std::int64_t key = 11;
      std::vector<float> w = initial(c, key), m(kDim, 0.0f), v(kDim, 0.0f), g(kDim);
      for (int step = 1; step <= 3; ++step) {
        for (int j = 0; j < kDim; ++j) g[j] = std::sin(0.37f * static_cast<float>(j * step + 1)) * 0.3f;
        t.apply(&key, 1, g.data());
        const double c1 = 1.0 - std::pow(0.9, step), c2 = 1.0 - std::pow(0.999, step);
        for (int j = 0; j < kDim; ++j) {
          if (opt == dp::SparseOptimizerKind::Sgd) w[j] -= static_cast<float>(lr * g[j]);
          if (opt == dp::SparseOptimizerKind::Adagrad) {
            m[j] += g[j] * g[j];
            w[j] -= static_cast<float>(lr * g[j] / (std::sqrt(static_cast<double>(m[j])) + 1e-10));
          }
          if (opt == dp::SparseOptimizerKind::Adam) {
            m[j] = static_cast<float>(0.9 * m[j] + (1.0 - 0.9) * g[j]);
            v[j] = static_cast<float>(0.999 * v[j] + (1.0 - 0.999) * g[j] * g[j]);
            w[j] -= static_cast<float>(lr * (m[j] / c1) / (std::sqrt(v[j] / c2) + 1e-8));
          }
        }
      }
      std::vector<float> got(kDim);
      t.pull(&key, 1, got.data());
      BOOST_TEST(got == w, boost::test_tools::per_element());
    }
  }
}

BOOST_AUTO_TEST_CASE(pull_and_push_over_two_shards) {
  Servers ps(2, 1, dp::UpdateMode::Async);
  const auto c = table("emb", 4, dp::SparseOptimizerKind::Sgd, 1.0);
  auto& client = *ps.clients[0];
  client.create_table(c);
  client.create_table(c);   // idempotent
  std::vector<std::int64_t> keys;
  for (std::int64_t k = 0; k < 200; ++k) keys.push_back(k * 7919);
  auto rows = client.pull("emb", 4, keys, 0, -1);
  for (std::size_t i = 0; i < keys.size(); ++i)
    BOOST_TEST(std::vector<float>(rows.begin() + i * 4, rows.begin() + (i + 1) * 4) == initial(c, keys[i]));
  std::vector<float> grads(keys.size() * 4, 0.25f);
  client.push("emb", 4, keys, grads, 0);
  rows = client.pull("emb", 4, keys, 1, -1);
  for (std::size_t i = 0; i < keys.size(); ++i)
    for (int j = 0; j < 4; ++j) BOOST_TEST(rows[i * 4 + j] == initial(c, keys[i])[j] - 0.25f);
  const auto stats = client.stats("emb");
  BOOST_TEST(stats[0].rows + stats[1].rows == 200);
  BOOST_TEST((stats[0].rows > 60 && stats[1].rows > 60));
  BOOST_TEST(stats[0].applied_through == 0);
}

BOOST_AUTO_TEST_CASE(sync_mode_applies_a_step_once_every_worker_pushed_it) {
  Servers ps(1, 2, dp::UpdateMode::Sync);
  const auto c = table("emb", 2, dp::SparseOptimizerKind::Adagrad, 0.5);
  ps.clients[0]->create_table(c);
  const std::vector<std::int64_t> keys = {3};
  ps.clients[0]->push("emb", 2, keys, {1.0f, 2.0f}, 0);
  // Worker 1 has not pushed step 0: a pull of step 1 must wait, and says for whom.
  dp::PsClient impatient({ps.servers[0]->address()}, kToken, 0, 300ms);
  const auto message = error_of([&] { impatient.pull("emb", 2, keys, 1, 1); });
  BOOST_TEST(message.find("behind: worker 1 (at -1)") != std::string::npos, message);
  std::thread late([&] {
    std::this_thread::sleep_for(200ms);
    ps.clients[1]->push("emb", 2, keys, {3.0f, -2.0f}, 0);
  });
  const auto row = ps.clients[0]->pull("emb", 2, keys, 1, 1);   // returns once step 0 is applied
  late.join();
  // One Adagrad step with the summed gradient (4, 0): w - lr * g / |g|.
  const auto w = initial(c, 3);
  BOOST_TEST(std::abs(row[0] - (w[0] - 0.5f)) <= 1e-6);
  BOOST_TEST(std::abs(row[1] - w[1]) <= 1e-6);
}

// The job failed elsewhere: a pull waiting on the server for a worker that is gone ends at once
// with AbortedError naming why, long before its timeout, and every later call fails alike.
BOOST_AUTO_TEST_CASE(an_aborted_client_ends_a_waiting_pull_at_once_and_refuses_later_calls) {
  Servers ps(1, 2, dp::UpdateMode::Sync);
  const auto c = table("emb", 2, dp::SparseOptimizerKind::Sgd);
  ps.clients[0]->create_table(c);
  const std::vector<std::int64_t> keys = {3};
  ps.clients[0]->push("emb", 2, keys, {1.0f, 2.0f}, 0);
  dp::PsClient waiting({ps.servers[0]->address()}, kToken, 0, 60s);
  std::thread stopper([&] {
    std::this_thread::sleep_for(200ms);
    waiting.abort("job stopped: rank 1 was lost");
  });
  const auto t0 = std::chrono::steady_clock::now();
  std::string message;
  try {
    waiting.pull("emb", 2, keys, 1, 1);   // waits for worker 1's push of step 0, which never comes
  } catch (const AbortedError& e) {
    message = e.what();
  }
  const auto waited = std::chrono::steady_clock::now() - t0;
  stopper.join();
  BOOST_TEST(message.find("parameter server shard 0 at " + ps.servers[0]->address().str()) != std::string::npos, message);
  BOOST_TEST(message.find("job stopped: rank 1 was lost") != std::string::npos, message);
  BOOST_TEST(waited < 30s);   // not its 60 s timeout
  BOOST_CHECK_THROW(waiting.pull("emb", 2, keys, 0, -1), AbortedError);
  ps.clients[1]->push("emb", 2, keys, {0.0f, 0.0f}, 0);   // the server's wait ends too
}

BOOST_AUTO_TEST_CASE(bounded_staleness_lets_a_worker_run_ahead_by_s_steps) {
  Servers ps(1, 2, dp::UpdateMode::Bounded);
  ps.clients[0]->create_table(table("emb", 2, dp::SparseOptimizerKind::Sgd));
  const std::vector<std::int64_t> keys = {1};
  dp::PsClient fast({ps.servers[0]->address()}, kToken, 0, 300ms);
  for (std::int64_t step = 0; step < 2; ++step) {
    fast.pull("emb", 2, keys, step, 2);   // steps 0 and 1 need nothing (or step -1)
    fast.push("emb", 2, keys, {0.1f, 0.1f}, step);
  }
  BOOST_CHECK_THROW(fast.pull("emb", 2, keys, 2, 2), rpc::TimeoutError);   // needs worker 1's step 0
  ps.clients[1]->push("emb", 2, keys, {0.1f, 0.1f}, 0);
  BOOST_CHECK_NO_THROW(fast.pull("emb", 2, keys, 2, 2));
}

BOOST_AUTO_TEST_CASE(bad_requests_get_clear_errors_and_the_server_keeps_serving) {
  Servers ps(1, 1, dp::UpdateMode::Async, 100);
  auto& client = *ps.clients[0];
  client.create_table(table("emb", 4, dp::SparseOptimizerKind::Sgd));
  const std::vector<std::pair<std::function<void()>, std::string>> cases = {
      {[&] { client.pull("nope", 4, {1}, 0, -1); }, "unknown table 'nope'; tables: emb"},
      {[&] { client.push("emb", 4, {1, 2}, std::vector<float>(8), 0); client.push("emb", 4, {1}, std::vector<float>(4), 5); },
       "worker 0 pushed step 5 after step 0"},
      {[&] {
         std::vector<std::int64_t> many(101);
         for (std::size_t i = 0; i < many.size(); ++i) many[i] = static_cast<std::int64_t>(i);
         client.pull("emb", 4, many, 0, -1);
       },
       "a pull of 101 keys; at most 100 per request"},
      {[&] { client.create_table(table("emb", 8, dp::SparseOptimizerKind::Sgd)); }, "exists with another definition"},
      {[&] { client.create_table(table("bad name!", 4, dp::SparseOptimizerKind::Sgd)); }, "use letters, digits"},
  };
  for (const auto& [call, expected] : cases) {
    const auto message = error_of(call);
    BOOST_TEST(message.find(expected) != std::string::npos, message);
  }
  // A wrong row width, sent around the client's own check.
  dp::PsShardConfig direct;
  dp::PsShard shard(direct);
  shard.create_table(table("emb", 4, dp::SparseOptimizerKind::Sgd));
  const std::vector<float> three(3);
  BOOST_TEST(error_of([&] { shard.push("emb", 0, 0, {1}, three.data(), three.size()); })
                 .find("rows of width 4: 1 keys need 4 gradient values, got 3") != std::string::npos);
  dp::PsClient intruder({ps.servers[0]->address()}, "wrong-token", 0, 1000ms);
  BOOST_TEST(error_of([&] { intruder.pull("emb", 4, {1}, 0, -1); }).find("wrong job token") != std::string::npos);
  BOOST_CHECK_NO_THROW(client.pull("emb", 4, {1, 2, 3}, 1, -1));   // still serving
}

// A TCP connection to `address` that sends nothing.
int silent_connection(const rpc::HostPort& address) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  BOOST_REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(address.port));
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  BOOST_REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  return fd;
}

// Whether the server closed `fd` before `deadline` (the read sees the end of the stream or a reset).
bool closed_by_server(int fd, std::chrono::steady_clock::time_point deadline) {
  pollfd p{fd, POLLIN, 0};
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  if (::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(0, left.count()))) != 1) return false;
  char byte = 0;
  return ::recv(fd, &byte, 1, 0) <= 0;
}

// Connections that send nothing cannot starve a server (300 of them once filled its 256 slots and a
// job with the token got no answer): they wait in slots of their own, the oldest closed when a
// newer one needs its slot, each closed when its first-call deadline passes, and a client with
// the token is served among them.
BOOST_AUTO_TEST_CASE(silent_connections_cannot_starve_a_server) {
  dp::PsShardConfig config;
  config.workers = 1;
  config.mode = dp::UpdateMode::Async;
  const rpc::GateLimits gate{1500ms, 16};
  dp::PsServer server({"127.0.0.1", 0}, config, kToken, gate);
  std::vector<int> silent;
  for (int i = 0; i < 300; ++i) silent.push_back(silent_connection(server.address()));
  dp::PsClient client({server.address()}, kToken, 0, 20000ms);
  BOOST_CHECK_NO_THROW(client.create_table(table("emb", 4, dp::SparseOptimizerKind::Sgd)));
  BOOST_CHECK_NO_THROW(client.pull("emb", 4, {1, 2}, 0, -1));
  int closed = 0;
  const auto deadline = std::chrono::steady_clock::now() + 60s;   // the server's is 1.5 s: generous for a loaded machine
  for (const int fd : silent) {
    closed += closed_by_server(fd, deadline) ? 1 : 0;
    ::close(fd);
  }
  BOOST_TEST(closed == 300);
  BOOST_TEST(server.gate().evicted() >= 300 - gate.unproven_slots);
  // The client's connection proved itself: it outlives the first-call deadline and still serves.
  std::this_thread::sleep_for(gate.first_call_deadline + 500ms);
  BOOST_CHECK_NO_THROW(client.pull("emb", 4, {1}, 0, -1));
  BOOST_TEST(server.gate().unproven() == 0);

  // A connection that trickles a byte now and then (each read then returns before its socket's
  // timeout) is still shut down at its deadline, counted from when it connected.
  const int trickle = silent_connection(server.address());
  const auto give_up = std::chrono::steady_clock::now() + 60s;
  bool shut = false;
  while (!shut && std::chrono::steady_clock::now() < give_up) {
    const char byte = 0;
    if (::send(trickle, &byte, 1, MSG_NOSIGNAL) != 1) break;   // the server has shut it down
    shut = closed_by_server(trickle, std::chrono::steady_clock::now() + 300ms);
  }
  ::close(trickle);
  BOOST_TEST(server.gate().expired() >= 1);
}

// Servers given in the wrong order, one missing or one twice, or run in another mode or for
// another replica count, are refused naming the address, instead of keys landing on wrong shards.
BOOST_AUTO_TEST_CASE(a_client_checks_that_each_server_is_the_shard_the_job_lists) {
  test::PsTestServers ps(2, 1, dp::UpdateMode::Sync, kToken);
  const auto a = ps.addresses[0], b = ps.addresses[1];
  const auto check = [&](std::vector<rpc::HostPort> list, int workers, dp::UpdateMode mode) {
    return error_of([&] { dp::PsClient(list, kToken, 0, 5000ms).check_identities(workers, mode); });
  };
  BOOST_TEST(check({a, b}, 1, dp::UpdateMode::Sync) == "(no error)");
  const auto swapped = check({b, a}, 1, dp::UpdateMode::Sync);
  BOOST_TEST(swapped.find("the parameter server at " + b.str() + " was started as shard 1 of 2, but the job lists it "
                          "as shard 0; give the addresses in shard order, each once") != std::string::npos, swapped);
  const auto missing = check({a}, 1, dp::UpdateMode::Sync);
  BOOST_TEST(missing.find(a.str() + " was started as one of 2 shards, but the job gives 1 server address(es)") !=
                 std::string::npos, missing);
  const auto twice = check({a, a}, 1, dp::UpdateMode::Sync);
  BOOST_TEST(twice.find(a.str() + " was started as shard 0 of 2, but the job lists it as shard 1") != std::string::npos,
             twice);
  const auto mode = check({a, b}, 1, dp::UpdateMode::Async);
  BOOST_TEST(mode.find("runs sync updates, but the job asks for async (/ps/mode)") != std::string::npos, mode);
  const auto workers = check({a, b}, 2, dp::UpdateMode::Sync);
  BOOST_TEST(workers.find("was started for 1 worker(s), but the job has 2 replica(s)") != std::string::npos, workers);
}

// A server that takes the connection and never answers: the pull is retried until its deadline,
// then fails naming the shard, its address, the step and the timeout, in words.
BOOST_AUTO_TEST_CASE(a_pull_that_gets_no_answer_names_shard_address_step_and_timeout) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  BOOST_REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 && ::listen(listener, 16) == 0);
  socklen_t size = sizeof addr;
  ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &size);
  const rpc::HostPort mute{"127.0.0.1", ntohs(addr.sin_port)};
  dp::PsClient client({mute}, kToken, 0, 1500ms);
  const auto message = error_of([&] { client.pull("emb", 4, {1, 2}, 7, -1); });
  ::close(listener);
  BOOST_TEST(message.find("parameter server shard 0 at " + mute.str() + " (pull of step 7): no answer within the "
                          "timeout of 1500 ms") != std::string::npos, message);
  BOOST_TEST(message.find("temporarily unavailable") == std::string::npos, message);
  BOOST_TEST(message.find("EAGAIN") == std::string::npos, message);
}

BOOST_AUTO_TEST_CASE(requests_of_any_size_go_in_chunks) {
  // Over a million keys over two shards: each shard's keys travel in parts of at most
  // ps_keys_per_chunk(8) keys (about 105k), several at once, and one push of many parts is one step.
  Servers ps(2, 1, dp::UpdateMode::Sync, dp::kPsMaxKeysPerRequest);
  const auto c = table("emb", 8, dp::SparseOptimizerKind::Sgd, 0.5);
  auto& client = *ps.clients[0];
  client.create_table(c);
  const std::int64_t n = (std::int64_t{1} << 20) + 7;
  std::vector<std::int64_t> keys(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) keys[static_cast<std::size_t>(i)] = i * 7919 + 3;
  const auto rows = client.pull("emb", 8, keys, 0, -1);
  BOOST_REQUIRE_EQUAL(rows.size(), keys.size() * 8);
  for (std::size_t i : {std::size_t{0}, std::size_t{123456}, keys.size() - 1}) {
    const auto want = initial(c, keys[i]);
    BOOST_TEST(std::vector<float>(rows.begin() + static_cast<std::ptrdiff_t>(i * 8),
                                  rows.begin() + static_cast<std::ptrdiff_t>(i * 8 + 8)) == want);
  }
  client.push("emb", 8, keys, std::vector<float>(keys.size() * 8, 1.0f), 0);
  std::int64_t total_rows = 0;
  for (const auto& r : client.stats("emb")) {
    total_rows += r.rows;
    BOOST_TEST(r.pulls > 2, "a shard's half of the keys should take several chunks, took " << r.pulls);
    BOOST_TEST(r.pushes == 1);   // the parts of one push count once
    BOOST_TEST(r.applied_through == 0);
  }
  BOOST_TEST(total_rows == n);
  const auto after = client.pull("emb", 8, {keys.back()}, 1, 1);   // waits for step 0
  const auto start = initial(c, keys.back());
  for (int j = 0; j < 8; ++j) BOOST_TEST(after[static_cast<std::size_t>(j)] == start[static_cast<std::size_t>(j)] - 0.5f);
}

BOOST_AUTO_TEST_CASE(a_push_in_parts_counts_once_survives_retries_and_a_restart) {
  const auto dir = std::filesystem::temp_directory_path() / ("pw_ps_parts_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  dp::PsShardConfig config;
  config.workers = 2;
  config.mode = dp::UpdateMode::Sync;
  config.dir = (dir / "live").string();
  const auto spec = table("emb", 2, dp::SparseOptimizerKind::Sgd, 1.0);
  const std::vector<std::int64_t> first = {1, 2}, second = {3};
  const std::vector<float> g_first = {1, 1, 2, 2}, g_second = {3, 3}, g_other = {10, 10};
  {
    dp::PsShard live(config);
    live.create_table(spec);
    live.push("emb", 0, 0, second, g_second.data(), g_second.size(), 1, 2);
    live.push("emb", 0, 0, second, g_second.data(), g_second.size(), 1, 2);   // a retry: ignored
    BOOST_TEST(error_of([&] { live.push("emb", 0, 0, first, g_first.data(), g_first.size(), 0, 3); })
                   .find("in 3 parts after announcing 2") != std::string::npos);
    BOOST_TEST(error_of([&] { live.push("emb", 0, 0, first, g_first.data(), g_first.size(), 2, 2); })
                   .find("parts are numbered 0 to parts - 1") != std::string::npos);
    // Killed with worker 0's step half pushed: the log holds the part.
    std::filesystem::copy(config.dir, dir / "crash", std::filesystem::copy_options::recursive);
  }
  config.dir = (dir / "crash").string();
  {
  dp::PsShard restarted(config);
  restarted.push("emb", 0, 0, second, g_second.data(), g_second.size(), 1, 2);   // the client's retry: ignored
  restarted.push("emb", 0, 0, first, g_first.data(), g_first.size(), 0, 2);
  BOOST_TEST(restarted.stats("emb").applied_through == -1);   // worker 1 has not pushed
  restarted.push("emb", 1, 0, {3}, g_other.data(), g_other.size());
  BOOST_TEST(restarted.stats("emb").applied_through == 0);
  const auto rows = restarted.pull("emb", {1, 2, 3}, 1, 1, std::chrono::steady_clock::now() + 1s);
  const std::vector<float> grads = {1, 1, 2, 2, 13, 13};   // key 3: 3 from worker 0, 10 from worker 1, once each
  for (std::int64_t k = 1; k <= 3; ++k)
    for (int j = 0; j < 2; ++j) {
      const auto i = static_cast<std::size_t>((k - 1) * 2 + j);
      BOOST_TEST(rows[i] == initial(spec, k)[static_cast<std::size_t>(j)] - grads[i]);
    }
  }
  std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(a_push_started_over_drops_the_parts_of_the_first_attempt) {
  dp::PsShardConfig config;
  config.mode = dp::UpdateMode::Async;
  dp::PsShard shard(config);
  const auto spec = table("emb", 1, dp::SparseOptimizerKind::Sgd, 1.0);
  shard.create_table(spec);
  const std::vector<float> stale = {100}, g0 = {1}, g1 = {2};
  // The worker died after one part of push 7; its restart pushes the step again as push 8.
  shard.push("emb", 0, 0, {5}, stale.data(), 1, 0, 2, 7);
  BOOST_TEST(shard.stats("emb").applied_through == -1);   // parts are held, not applied
  shard.push("emb", 0, 0, {5}, g0.data(), 1, 0, 2, 8);
  shard.push("emb", 0, 0, {6}, g1.data(), 1, 1, 2, 8);
  BOOST_TEST(shard.stats("emb").applied_through == 0);
  const auto rows = shard.pull("emb", {5, 6}, 1, -1, std::chrono::steady_clock::now());
  BOOST_TEST(rows[0] == initial(spec, 5)[0] - 1.0f);   // the stale part is gone
  BOOST_TEST(rows[1] == initial(spec, 6)[0] - 2.0f);
}

BOOST_AUTO_TEST_CASE(a_restarted_shard_comes_back_with_every_acknowledged_push) {
  const auto dir = std::filesystem::temp_directory_path() / ("pw_ps_" + std::to_string(::getpid()));
  const auto crash = dir / "crash";
  std::filesystem::remove_all(dir);
  for (auto mode : {dp::UpdateMode::Async, dp::UpdateMode::Sync}) {
    BOOST_TEST_CONTEXT(dp::update_mode_name(mode)) {
      std::filesystem::remove_all(dir);
      dp::PsShardConfig c;
      c.dir = (dir / "live").string();
      c.mode = mode;
      c.snapshot_every = 3;
      const auto spec = table("emb", 4, dp::SparseOptimizerKind::Adam, 0.01);
      std::vector<std::int64_t> keys = {1, 5, 9, 1000003};
      std::vector<float> before;
      {
        dp::PsShard live(c);
        live.create_table(spec);
        for (std::int64_t step = 0; step < 8; ++step) {
          std::vector<float> g(keys.size() * 4);
          for (std::size_t i = 0; i < g.size(); ++i) g[i] = 0.01f * static_cast<float>(i + step);
          live.push("emb", 0, step, keys, g.data(), g.size());
        }
        before = live.pull("emb", keys, 8, -1, std::chrono::steady_clock::now());
        // What a killed server leaves on disk: the last snapshot and the log after it.
        std::filesystem::copy(c.dir, crash, std::filesystem::copy_options::recursive);
      }
      // A record cut short by the crash is not an acknowledged push: it is dropped.
      std::ofstream(crash / "emb.shard0.wal", std::ios::binary | std::ios::app) << "PWA";
      c.dir = crash.string();
      dp::PsShard restarted(c);
      BOOST_TEST(restarted.pull("emb", keys, 8, -1, std::chrono::steady_clock::now()) == before);
      BOOST_TEST(restarted.stats("emb").applied_through == 7);
      // And it carries on: the next step is 8.
      std::vector<float> g(keys.size() * 4, 0.1f);
      BOOST_CHECK_NO_THROW(restarted.push("emb", 0, 8, keys, g.data(), g.size()));
      std::filesystem::remove_all(crash);
    }
  }
  std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(a_folder_from_another_job_or_a_foreign_snapshot_is_refused) {
  const auto dir = std::filesystem::temp_directory_path() / ("pw_ps_bad_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  dp::PsShardConfig c;
  c.dir = dir.string();
  c.workers = 2;
  {
    dp::PsShard shard(c);
    shard.create_table(table("emb", 4, dp::SparseOptimizerKind::Sgd));
  }
  c.workers = 3;   // another job's shape
  BOOST_TEST(error_of([&] { dp::PsShard again(c); }).find("is from a job of 1 shards, 2 workers") != std::string::npos);
  c.workers = 2;
  std::ofstream(dir / "emb.shard0.snap", std::ios::binary | std::ios::trunc) << "not a snapshot at all, no";
  const auto message = error_of([&] { dp::PsShard again(c); });
  BOOST_TEST((message.find("cut short") != std::string::npos || message.find("not a pipewright table snapshot") !=
                  std::string::npos),
             message);
  std::ofstream(dir / "shard0.json", std::ios::trunc) << "{ truncated";
  BOOST_TEST(error_of([&] { dp::PsShard again(c); }).find("is not a parameter-server manifest") != std::string::npos);
  std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_SUITE_END()
