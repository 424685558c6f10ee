// Parameter-server benchmarks (print, never assert), one JSON line per figure: pull and push of a
// batch of unique embedding rows from 1, 2 and 4 shards on loopback (servers in this process,
// one client asking every shard at once), beside a plain TCP socket moving the same bytes.
//   build/bin/ps_bench [--keys 16384] [--dim 64] [--reps 15]
#include <algorithm>
#include <cstdio>
#include <random>
#include <thread>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench/stats.h"
#include "bench/raw_socket.h"
#include "core/clock.h"
#include "dataparallel/ps_client.h"
#include "dataparallel/ps_server.h"

using namespace pw;
using pw::bench::median;
using namespace std::chrono_literals;

namespace {


// Seconds to move one message of `bytes` over a plain socket (median of `reps`).
double socket_seconds(std::size_t bytes, int reps) {
  bench::SocketPair pair;
  std::vector<char> out(bytes, 1), in(bytes);
  std::vector<double> times;
  for (int i = 0; i < reps + 1; ++i) {
    const auto t0 = Clock::now();
    std::thread receiver([&] { bench::recv_message(pair.server, in); });
    bench::send_message(pair.client, out);
    receiver.join();
    if (i > 0) times.push_back(seconds_since(t0));
  }
  return median(times);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"parameter-server benchmarks"};
  int keys_per_batch = 16384, dim = 64, reps = 15;
  app.add_option("--keys", keys_per_batch)->check(CLI::PositiveNumber);
  app.add_option("--dim", dim)->check(CLI::PositiveNumber);
  app.add_option("--reps", reps)->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    std::mt19937_64 rng(3);
    const std::size_t bytes = static_cast<std::size_t>(keys_per_batch) * static_cast<std::size_t>(dim) * sizeof(float);
    const double socket = socket_seconds(bytes, reps);
    for (int shards : {1, 2, 4}) {
      std::vector<std::unique_ptr<dp::PsServer>> servers;
      std::vector<rpc::HostPort> addresses;
      for (int s = 0; s < shards; ++s) {
        dp::PsShardConfig c;
        c.shard = s;
        c.shards = shards;
        servers.push_back(std::make_unique<dp::PsServer>(rpc::HostPort{"127.0.0.1", 0}, c, "bench-token"));
        addresses.push_back(servers.back()->address());
      }
      dp::PsClient client(addresses, "bench-token", 0, 60s);
      dp::TableConfig t;
      t.name = "bench";
      t.dim = dim;
      t.optimizer = dp::SparseOptimizerKind::Sgd;
      client.create_table(t);
      std::vector<double> pulls, pushes;
      std::vector<float> grads(static_cast<std::size_t>(keys_per_batch) * static_cast<std::size_t>(dim), 0.001f);
      for (int i = 0; i < reps + 1; ++i) {
        std::vector<std::int64_t> keys(static_cast<std::size_t>(keys_per_batch));
        for (auto& k : keys) k = static_cast<std::int64_t>(rng() >> 1);
        auto t0 = Clock::now();
        const auto rows = client.pull("bench", dim, keys, i, -1);
        const double pull_s = seconds_since(t0);
        t0 = Clock::now();
        client.push("bench", dim, keys, grads, i);
        const double push_s = seconds_since(t0);
        if (i > 0) {   // the first creates the connections
          pulls.push_back(pull_s);
          pushes.push_back(push_s);
        }
      }
      const double pull = median(pulls), push = median(pushes);
      std::printf("%s\n", nlohmann::json{{"bench", "ps_pull_push"}, {"shards", shards}, {"keys", keys_per_batch},
                                         {"dim", dim}, {"bytes", bytes},
                                         {"pull_rows_per_s", keys_per_batch / pull}, {"pull_GBps", bytes / pull / 1e9},
                                         {"push_rows_per_s", keys_per_batch / push}, {"push_GBps", bytes / push / 1e9},
                                         {"socket_GBps", bytes / socket / 1e9}, {"pull_ratio", socket / pull},
                                         {"push_ratio", socket / push}}
                              .dump()
                              .c_str());
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ps_bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
