// `pipewright ps serve` as a process: serves pulls and pushes, and after kill -9 and a restart on
// the same folder it has every acknowledged push.
#include <atomic>
#include <filesystem>
#include <thread>
#include <algorithm>
#include <regex>

#include <boost/test/unit_test.hpp>

#include "dataparallel/ps/client.h"
#include "dataparallel/ps/limits.h"
#include "dataparallel/ps/table.h"
#include "tests/tools/background_command.h"
#include "tests/tools/cli_runner.h"
#include "tests/dataparallel/ps/test_servers.h"

using namespace pw;
using pw::test::BackgroundCommand;
using pw::test::ScratchDir;
using namespace std::chrono_literals;

namespace {
rpc::HostPort address_in(const std::string& log) {
  std::smatch m;
  BOOST_REQUIRE_MESSAGE(std::regex_search(log, m, std::regex("listening on ([0-9.]+:[0-9]+)")), log);
  return rpc::parse_host_port(m[1].str());
}

// `serve` (a `pipewright ps serve ... --bind ` command) on `bind`, once it listens.
std::unique_ptr<BackgroundCommand> serve_on(const std::string& serve, const std::string& bind, const std::string& log) {
  auto server = std::make_unique<BackgroundCommand>(serve + bind, log);
  BOOST_REQUIRE_MESSAGE(server->wait_for_output("listening on", 30s), server->output());
  return server;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(ps_cli)

BOOST_AUTO_TEST_CASE(a_killed_server_restarts_with_every_acknowledged_push) {
  ScratchDir dir("pscli");
  const std::string serve = "env PW_JOB_TOKEN=tok123-0123456789 " + pw::test::pipewright_binary() + " ps serve --dir " +
                            dir.file("shard") + " --snapshot-every 4 --bind ";
  auto first = serve_on(serve, "127.0.0.1:0", dir.file("first.log"));
  const auto address = address_in(first->output());
  dp::TableConfig t;
  t.name = "emb";
  t.dim = 8;
  t.optimizer = dp::SparseOptimizerKind::Adagrad;
  std::vector<std::int64_t> keys = {2, 3, 5, 7, 11, 13};
  std::vector<float> before;
  {
    dp::PsClient client({address}, "tok123-0123456789", 0, 5000ms);
    client.create_table(t);
    for (std::int64_t step = 0; step < 10; ++step) {
      std::vector<float> g(keys.size() * 8);
      for (std::size_t i = 0; i < g.size(); ++i) g[i] = 0.1f * static_cast<float>((i + step) % 7) - 0.3f;
      client.push("emb", 8, keys, g, step);
    }
    before = client.pull("emb", 8, keys, 10, -1);
  }
  kill(first->pid(), SIGKILL);
  BOOST_REQUIRE(first->wait(10s).has_value());
  first.reset();
  const auto second = serve_on(serve, address.str(), dir.file("second.log"));
  dp::PsClient client({address}, "tok123-0123456789", 0, 5000ms);
  BOOST_TEST(client.pull("emb", 8, keys, 10, -1) == before);
  BOOST_CHECK_NO_THROW(client.push("emb", 8, keys, std::vector<float>(keys.size() * 8, 0.0f), 10));
  kill(second->pid(), SIGTERM);
  BOOST_TEST(second->wait(10s).value_or(-1) == 0);
}

// A server started with table bounds: a table with others is refused with one line; its own
// bounded table, killed with -9 and restarted, comes back with the same rows and counters.
BOOST_AUTO_TEST_CASE(a_bounded_server_refuses_other_bounds_and_restarts_with_its_evictions) {
  ScratchDir dir("pscli_bounded");
  const std::string serve = "env PW_JOB_TOKEN=tok789-0123456789 " + pw::test::pipewright_binary() + " ps serve --dir " +
                            dir.file("shard") + " --snapshot-every 5 --admit-after 2 --max-rows 8 --bind ";
  auto first = serve_on(serve, "127.0.0.1:0", dir.file("first.log"));
  BOOST_TEST(first->output().find("tables: admit after 2, at most 8 rows per shard") != std::string::npos,
             first->output());
  const auto address = address_in(first->output());
  dp::TableConfig t;
  t.name = "emb";
  t.dim = 4;
  t.bounds = {2, 8, 0};
  std::vector<std::int64_t> all;
  for (std::int64_t k = 0; k < 30; ++k) all.push_back(k);
  std::vector<float> before;
  dp::PsClient::ShardReport stats_before;
  {
    dp::PsClient client({address}, "tok789-0123456789", 0, 5000ms);
    auto other = t;
    other.bounds.max_rows = 9;
    const auto refused = pw::test::error_of([&] { client.create_table(other); });
    BOOST_TEST(refused.find("table 'emb' asks for admit after 2, at most 9 rows per shard, rows never expire; this "
                            "server was started for admit after 2, at most 8 rows per shard") != std::string::npos,
               refused);
    client.create_table(t);
    for (std::int64_t step = 0; step < 12; ++step) {
      std::vector<std::int64_t> keys;
      for (std::int64_t k = step; k < step + 6; ++k) keys.push_back(k % 30);
      std::sort(keys.begin(), keys.end());
      client.push("emb", 4, keys, std::vector<float>(keys.size() * 4, 0.25f), step);
    }
    before = client.pull("emb", 4, all, 12, -1);
    stats_before = client.stats("emb").front();
    BOOST_TEST(stats_before.rows <= 8);
    BOOST_TEST(stats_before.evictions > 0);
    BOOST_TEST(stats_before.dropped_rows > 0);
  }
  kill(first->pid(), SIGKILL);
  BOOST_REQUIRE(first->wait(10s).has_value());
  first.reset();
  const auto second = serve_on(serve, address.str(), dir.file("second.log"));
  dp::PsClient client({address}, "tok789-0123456789", 0, 5000ms);
  BOOST_TEST(client.pull("emb", 4, all, 12, -1) == before);
  const auto after = client.stats("emb").front();
  BOOST_TEST(after.rows == stats_before.rows);
  BOOST_TEST(after.admissions == stats_before.admissions);
  BOOST_TEST(after.evictions == stats_before.evictions);
  BOOST_TEST(after.dropped_rows == stats_before.dropped_rows);
  BOOST_TEST(after.peak_rows == stats_before.peak_rows);
  kill(second->pid(), SIGTERM);
  BOOST_TEST(second->wait(10s).value_or(-1) == 0);
}

// Pushes of two parts each (40,000 keys of width 32: over one 4 MiB chunk) while other threads
// pull, snapshots every 2 pushes, and kill -9 in the middle of a push: the restarted server has
// every acknowledged push, and the push in flight wholly or not at all.
BOOST_AUTO_TEST_CASE(kill_nine_during_chunked_pushes_and_pulls_loses_no_acknowledged_push) {
  ScratchDir dir("pscli_kill");
  const std::string serve = "env PW_JOB_TOKEN=tok456-0123456789 " + pw::test::pipewright_binary() + " ps serve --dir " +
                            dir.file("shard") + " --snapshot-every 2 --bind ";
  auto first = serve_on(serve, "127.0.0.1:0", dir.file("first.log"));
  const auto address = address_in(first->output());
  constexpr int kDim = 32;
  constexpr std::int64_t kKeysPerStep = 40000;
  BOOST_REQUIRE(static_cast<std::size_t>(kKeysPerStep) > dp::ps_keys_per_chunk(kDim));
  dp::TableConfig t;
  t.name = "emb";
  t.dim = kDim;
  t.optimizer = dp::SparseOptimizerKind::Sgd;
  t.lr = 1.0;
  t.init_seed = 9;
  auto keys_of = [](std::int64_t step) {
    std::vector<std::int64_t> keys(static_cast<std::size_t>(kKeysPerStep));
    for (std::int64_t i = 0; i < kKeysPerStep; ++i) keys[static_cast<std::size_t>(i)] = step * kKeysPerStep + i;
    return keys;
  };
  auto grad_of = [](std::int64_t step) { return 0.25f + 0.125f * static_cast<float>(step % 4); };
  std::atomic<std::int64_t> acknowledged{-1};
  std::atomic<bool> stop{false};
  {
    dp::PsClient setup({address}, "tok456-0123456789", 0, 5000ms);
    setup.create_table(t);
  }
  std::thread pusher([&] {
    dp::PsClient client({address}, "tok456-0123456789", 0, 1500ms);
    try {
      for (std::int64_t step = 0; !stop; ++step) {
        client.push("emb", kDim, keys_of(step), std::vector<float>(kKeysPerStep * kDim, grad_of(step)), step);
        acknowledged = step;
      }
    } catch (const std::exception&) {   // the server was killed
    }
  });
  std::thread puller([&] {
    dp::PsClient client({address}, "tok456-0123456789", 1, 1500ms);
    std::vector<std::int64_t> keys(5000);
    try {
      for (std::int64_t round = 0; !stop; ++round) {
        for (std::size_t i = 0; i < keys.size(); ++i) keys[i] = round * 7919 + static_cast<std::int64_t>(i) * 13;
        client.pull("emb", kDim, keys, 0, -1);
      }
    } catch (const std::exception&) {
    }
  });
  while (acknowledged < 5) std::this_thread::sleep_for(5ms);
  kill(first->pid(), SIGKILL);
  stop = true;
  pusher.join();
  puller.join();
  BOOST_REQUIRE(first->wait(10s).has_value());
  first.reset();
  const std::int64_t acked = acknowledged;
  const auto second = serve_on(serve, address.str(), dir.file("second.log"));
  dp::PsClient client({address}, "tok456-0123456789", 0, 5000ms);
  std::vector<float> start(kDim);
  for (std::int64_t step = 0; step <= acked + 1; ++step) {
    const auto keys = keys_of(step);
    const auto rows = client.pull("emb", kDim, keys, 0, -1);
    std::int64_t updated = 0, wrong = 0;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      dp::initial_row(t, keys[i], start.data());
      const bool is_updated = rows[i * kDim] == start[0] - grad_of(step);
      const bool is_initial = rows[i * kDim] == start[0];
      updated += is_updated ? 1 : 0;
      wrong += is_updated || is_initial ? 0 : 1;
    }
    BOOST_TEST(wrong == 0, "step " << step << ": " << wrong << " rows neither initial nor updated once");
    if (step <= acked)
      BOOST_TEST(updated == kKeysPerStep, "acknowledged step " << step << ": " << updated << " of " << kKeysPerStep);
    else
      BOOST_TEST((updated == 0 || updated == kKeysPerStep), "the push in flight is applied in part: " << updated);
  }
  BOOST_TEST_MESSAGE("killed after " << acked + 1 << " acknowledged pushes");
  kill(second->pid(), SIGTERM);
  BOOST_TEST(second->wait(10s).value_or(-1) == 0);
}

BOOST_AUTO_TEST_CASE(bad_serve_flags_get_one_line_errors) {
  auto r = pw::test::run_pipewright("ps serve --mode eventually");
  BOOST_TEST(r.status == 2);
  BOOST_TEST(r.output.find("needs the job's token in PW_JOB_TOKEN") != std::string::npos, r.output);
  const auto bad_shard = std::system(("env PW_JOB_TOKEN=x-0123456789abcdef " + pw::test::pipewright_binary() +
                                   " ps serve --shard 3 --shards 2 > /dev/null 2>&1").c_str());
  BOOST_TEST(WEXITSTATUS(bad_shard) == 2);   // shard 3 outside 2 shards
}

BOOST_AUTO_TEST_SUITE_END()
