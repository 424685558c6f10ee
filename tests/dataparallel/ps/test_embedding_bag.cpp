// The worker side of the parameter servers: the hot-row cache (LRU, step window), and
// PsEmbeddingBag against real servers in this process: the same numbers as a local EmbeddingBag
// in sync mode, de-duplicated pulls and the cache's traffic, gradient scaling across replicas,
// what each update mode waits for, and carrying on after the servers restart from their folder.
#include <cmath>
#include <filesystem>
#include <functional>
#include <random>
#include <set>
#include <thread>

#include <boost/test/unit_test.hpp>

#include "core/clock.h"
#include "core/error.h"
#include "dataparallel/ps/client.h"
#include "dataparallel/ps/embedding_bag.h"
#include "dataparallel/ps/server.h"
#include "models/layers/embedding_bag.h"
#include "models/rng.h"
#include "rpc/transport.h"
#include "tests/dataparallel/ps/test_servers.h"

using namespace pw;
using namespace std::chrono_literals;
using kernels::Tensor;
using models::Mode;
using pw::test::error_of;

namespace {

const std::string kToken = "ps-bag-token-01234";
constexpr std::int64_t kRows = 50;
constexpr int kDim = 8, kBag = 3;
constexpr std::uint64_t kSeed = 7;

// The table a model seeded kSeed with a local EmbeddingBag at `name` would start from.
dp::TableConfig table(const std::string& name, double lr = 0.5) {
  dp::TableConfig c;
  c.name = name;
  c.dim = kDim;
  c.optimizer = dp::SparseOptimizerKind::Sgd;
  c.lr = lr;
  c.init_seed = models::hash_name(kSeed, name + ".weight");
  c.init_scale = models::embedding_bag_init_scale(kRows);
  return c;
}

struct Servers : test::PsTestServers {
  Servers(int shards, int workers, dp::UpdateMode mode, const std::filesystem::path& dir = {})
      : PsTestServers(shards, workers, mode, kToken, std::size_t{1} << 22, dir) {}
};

dp::PsBagOptions options(const std::vector<rpc::HostPort>& servers, const dp::TableConfig& t, dp::UpdateMode update,
                         int staleness = 1) {
  dp::PsBagOptions o;
  o.servers = servers;
  o.job_token = kToken;
  o.table = t;
  o.bag_size = kBag;
  o.update = update;
  o.staleness = staleness;
  o.timeout = 5s;
  return o;
}

Tensor ids(const std::vector<std::int64_t>& v) {
  return Tensor::from_vector(v, {static_cast<std::int64_t>(v.size()) / kBag, kBag});
}

// A batch of `batch` bags drawn from few rows (so ids repeat), and its output gradient.
std::pair<Tensor, Tensor> batch_of(std::mt19937_64& rng, std::int64_t batch) {
  std::uniform_int_distribution<std::int64_t> id(0, 19);
  std::vector<std::int64_t> v(static_cast<std::size_t>(batch * kBag));
  for (auto& x : v) x = id(rng);
  v[1] = v[0];   // at least one id twice in a bag
  std::normal_distribution<float> g;
  std::vector<float> grad(static_cast<std::size_t>(batch * kDim));
  for (auto& x : grad) x = g(rng);
  return {ids(v), Tensor::from_vector(grad, {batch, kDim})};
}

bool close(const Tensor& a, const Tensor& b, double rel = 1e-6) {
  const auto x = a.to_float_vector(), y = b.to_float_vector();
  if (x.size() != y.size()) return false;
  for (std::size_t i = 0; i < x.size(); ++i)
    if (std::abs(x[i] - y[i]) > rel * (1.0 + std::abs(y[i]))) return false;
  return true;
}

// One step of one micro-batch on a PsEmbeddingBag: forward, backward, push.
void train_step(dp::PsEmbeddingBag& bag, const Tensor& x, const Tensor& grad, int replica = 0) {
  auto out = bag.forward(x, Mode::Train);
  bag.backward(*out.ctx, grad);
  bag.push_gradients(replica, dp::RemoteGradients::Push);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ps_embedding_bag)

BOOST_AUTO_TEST_CASE(sync_mode_computes_what_a_local_embedding_bag_computes) {
  for (auto mode : {models::BagMode::Sum, models::BagMode::Mean}) {
    BOOST_TEST_CONTEXT((mode == models::BagMode::Sum ? "sum" : "mean")) {
      const std::string name = mode == models::BagMode::Sum ? "emb_sum" : "emb_mean";
      const auto t = table(name, 0.5);
      models::EmbeddingBag local(kRows, kDim, kBag, mode);
      local.initialize(kSeed, name + ".");
      Tensor& w = local.parameters()[0]->value;
      Tensor& w_grad = local.parameters()[0]->grad;
      std::vector<float> row(kDim);
      for (std::int64_t r = 0; r < kRows; ++r) {   // the keyed-rows contract, row by row
        dp::initial_row(t, r, row.data());
        BOOST_TEST(std::equal(row.begin(), row.end(), w.data<float>() + r * kDim));
      }
      Servers ps(2, 1, dp::UpdateMode::Sync);
      auto o = options(ps.addresses, t, dp::UpdateMode::Sync);
      o.mode = mode;
      dp::PsEmbeddingBag remote(o);
      std::mt19937_64 rng(11);
      for (int step = 0; step < 5; ++step) {
        const int micro_batches = step % 2 + 1;   // steps of one and of two micro-batches
        for (int mb = 0; mb < micro_batches; ++mb) {
          const auto [x, g] = batch_of(rng, 16);
          auto want = local.forward(x, Mode::Train);
          auto got = remote.forward(x, Mode::Train);
          BOOST_TEST(close(got.y, want.y), "step " << step << ", micro-batch " << mb);
          local.backward(*want.ctx, g);
          remote.backward(*got.ctx, g);
        }
        float* wv = w.data<float>();
        const float* gv = w_grad.data<float>();
        for (std::int64_t i = 0; i < w.numel(); ++i) wv[i] -= 0.5f * gv[i];
        local.zero_grad();
        remote.push_gradients(0, dp::RemoteGradients::Push);
        BOOST_TEST(remote.next_step() == step + 1);
      }
    }
  }
}

// A step reads each row once: repeated ids, and ids a later micro-batch of the step shares, come
// from the rows it already holds; the next step pulls them again.
BOOST_AUTO_TEST_CASE(repeated_ids_are_pulled_once_and_the_next_step_sees_the_servers_rows) {
  Servers ps(2, 1, dp::UpdateMode::Sync);
  const auto t = table("emb");
  dp::PsEmbeddingBag bag(options(ps.addresses, t, dp::UpdateMode::Sync));
  const Tensor x = ids({4, 4, 9, 9, 4, 12});
  const Tensor g = Tensor::full({2, kDim}, 1.0);
  auto first = bag.forward(x, Mode::Train);
  BOOST_TEST(bag.traffic().pulled_rows == 3);
  bag.forward(ids({4, 9, 30}), Mode::Train);   // another micro-batch of the step: only the new row
  BOOST_TEST(bag.traffic().pulled_rows == 4);
  bag.backward(*first.ctx, g);
  bag.push_gradients(0, dp::RemoteGradients::Push);
  auto next = bag.forward(x, Mode::Train);
  BOOST_TEST(bag.traffic().pulled_rows == 7);
  dp::PsClient client(ps.addresses, kToken, 0, 5000ms);
  const auto rows = client.pull("emb", kDim, {4, 9, 12}, 1, 1);
  // Bags {4, 4, 9} and {9, 4, 12}, summed from the rows as they are now.
  for (int j = 0; j < kDim; ++j) {
    BOOST_TEST(std::abs(next.y.data<float>()[j] - (2 * rows[j] + rows[kDim + j])) <= 1e-6);
    BOOST_TEST(std::abs(next.y.data<float>()[kDim + j] - (rows[j] + rows[kDim + j] + rows[2 * kDim + j])) <= 1e-6);
  }
  BOOST_TEST(!close(next.y, first.y));
}

BOOST_AUTO_TEST_CASE(replicas_scaled_by_one_half_apply_the_mean_gradient) {
  std::mt19937_64 rng(5);
  const auto batch = batch_of(rng, 12);
  const Tensor &x = batch.first, &g = batch.second;
  const auto t = table("emb", 0.25);
  std::vector<std::int64_t> keys;
  for (std::int64_t k = 0; k < 20; ++k) keys.push_back(k);

  Servers two(2, 2, dp::UpdateMode::Sync);
  std::vector<std::unique_ptr<dp::PsEmbeddingBag>> replicas;
  for (int r = 0; r < 2; ++r) {
    auto o = options(two.addresses, t, dp::UpdateMode::Sync);
    o.gradient_scale = 0.5;
    replicas.push_back(std::make_unique<dp::PsEmbeddingBag>(o));
  }
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] { errors[static_cast<std::size_t>(r)] = error_of([&] { train_step(*replicas[r], x, g, r); }); });
  for (auto& th : threads) th.join();
  for (const auto& e : errors) BOOST_TEST(e == "(no error)");

  Servers one(2, 1, dp::UpdateMode::Sync);
  dp::PsEmbeddingBag single(options(one.addresses, t, dp::UpdateMode::Sync));
  train_step(single, x, g);

  const auto averaged = dp::PsClient(two.addresses, kToken, 0, 5000ms).pull("emb", kDim, keys, 1, 1);
  const auto reference = dp::PsClient(one.addresses, kToken, 0, 5000ms).pull("emb", kDim, keys, 1, 1);
  BOOST_TEST(averaged == reference);
  std::vector<float> start(keys.size() * kDim);
  for (std::size_t i = 0; i < keys.size(); ++i) dp::initial_row(t, keys[i], start.data() + i * kDim);
  BOOST_TEST(reference != start);   // the batch did move rows
}

BOOST_AUTO_TEST_CASE(eval_reads_without_waiting_while_train_waits_for_the_slow_worker) {
  Servers ps(2, 2, dp::UpdateMode::Sync);
  const auto t = table("emb");
  auto o = options(ps.addresses, t, dp::UpdateMode::Sync);
  o.timeout = 300ms;
  dp::PsEmbeddingBag bag(o);
  const Tensor x = ids({1, 2, 3});
  train_step(bag, x, Tensor::full({1, kDim}, 1.0));   // worker 0's step 0; worker 1 never pushes
  BOOST_TEST(bag.next_step() == 1);

  // Worker 1 never pushes, so an eval pull that waited for step 0 would end in a TimeoutError
  // after 300 ms; it returns the rows as they are instead (no timing asserted: a loaded machine).
  const auto eval = bag.forward(x, Mode::Eval);
  // Step 0 is not applied (worker 1 is missing): the rows are still the initial ones.
  std::vector<float> want(kDim, 0.0f), row(kDim);
  for (std::int64_t k : {1, 2, 3}) {
    dp::initial_row(t, k, row.data());
    for (int j = 0; j < kDim; ++j) want[static_cast<std::size_t>(j)] += row[static_cast<std::size_t>(j)];
  }
  BOOST_TEST(close(eval.y, Tensor::from_vector(want, {1, kDim})));

  std::string message;
  try {
    bag.forward(x, Mode::Train);
    message = "(no error)";
  } catch (const rpc::TimeoutError& e) {
    message = e.what();
  } catch (const std::exception& e) {
    message = std::string("not a TimeoutError: ") + e.what();
  }
  BOOST_TEST(message.find("a pull of step 1") != std::string::npos, message);
  BOOST_TEST(message.find("behind: worker 1 (at -1)") != std::string::npos, message);
}

BOOST_AUTO_TEST_CASE(bounded_staleness_zero_is_refused_and_async_never_waits) {
  // Refused before any server is contacted (nothing listens at this address).
  auto o = options({rpc::HostPort{"127.0.0.1", 1}}, table("emb"), dp::UpdateMode::Bounded, 0);
  const auto message = error_of([&] { dp::PsEmbeddingBag bag(o); });
  BOOST_TEST(message.find("needs a staleness >= 1") != std::string::npos, message);
  BOOST_CHECK_THROW(dp::PsEmbeddingBag{o}, InputError);

  const Tensor x = ids({1, 2, 3}), g = Tensor::full({1, kDim}, 0.1);
  for (auto update : {dp::UpdateMode::Async, dp::UpdateMode::Bounded}) {
    BOOST_TEST_CONTEXT(dp::update_mode_name(update)) {
      Servers ps(2, 2, update);   // worker 1 never pushes
      auto fast = options(ps.addresses, table("emb"), update, 2);
      fast.timeout = 300ms;
      dp::PsEmbeddingBag bag(fast);
      const int free_steps = update == dp::UpdateMode::Async ? 6 : 2;   // bounded s = 2: steps 0 and 1
      for (int step = 0; step < free_steps; ++step) BOOST_CHECK_NO_THROW(train_step(bag, x, g));
      if (update == dp::UpdateMode::Bounded) {
        // Step 2 needs worker 1's step 0.
        BOOST_CHECK_THROW(bag.forward(ids({4, 5, 6}), Mode::Train), rpc::TimeoutError);
      }
    }
  }
}

// The engine hands each step's inputs over one step early (Engine::prefetch): the rows come from
// that background pull, and sync training still computes what a local table computes.
BOOST_AUTO_TEST_CASE(prefetched_sync_steps_compute_what_a_local_embedding_bag_computes) {
  const auto t = table("emb_prefetch", 0.5);
  models::EmbeddingBag local(kRows, kDim, kBag, models::BagMode::Sum);
  local.initialize(kSeed, "emb_prefetch.");
  Tensor& w = local.parameters()[0]->value;
  Tensor& w_grad = local.parameters()[0]->grad;
  Servers ps(2, 1, dp::UpdateMode::Sync);
  dp::PsEmbeddingBag remote(options(ps.addresses, t, dp::UpdateMode::Sync));
  std::mt19937_64 rng(5);
  constexpr int kSteps = 6, kMicro = 2;
  std::vector<std::vector<std::pair<Tensor, Tensor>>> steps(kSteps);
  std::int64_t later_unique = 0, first_unique = 0;
  for (int step = 0; step < kSteps; ++step) {
    std::set<std::int64_t> unique;
    for (int mb = 0; mb < kMicro; ++mb) {
      steps[step].push_back(batch_of(rng, 8));
      const Tensor& x = steps[step].back().first;
      unique.insert(x.data<std::int64_t>(), x.data<std::int64_t>() + x.numel());
    }
    (step == 0 ? first_unique : later_unique) += static_cast<std::int64_t>(unique.size());
  }
  for (int step = 0; step < kSteps; ++step) {
    if (step + 1 < kSteps) remote.prefetch({steps[step + 1][0].first, steps[step + 1][1].first});
    for (const auto& [x, g] : steps[step]) {
      auto want = local.forward(x, Mode::Train);
      auto got = remote.forward(x, Mode::Train);
      BOOST_TEST(close(got.y, want.y), "step " << step);
      local.backward(*want.ctx, g);
      remote.backward(*got.ctx, g);
    }
    float* wv = w.data<float>();
    const float* gv = w_grad.data<float>();
    for (std::int64_t i = 0; i < w.numel(); ++i) wv[i] -= 0.5f * gv[i];
    local.zero_grad();
    remote.push_gradients(0, dp::RemoteGradients::Push);
  }
  // Step 0 pulled its rows in its forward (once per micro-batch); every later step's came ahead.
  BOOST_TEST(remote.traffic().prefetched_rows.load() == later_unique);
  BOOST_TEST(remote.traffic().pulled_rows.load() - remote.traffic().prefetched_rows.load() >= first_unique);
  BOOST_TEST(remote.traffic().lookup_waits.load() <= kMicro + kSteps - 1);   // step 0's pulls, then at most one wait a step
}

// Two workers, one slowed by a sleep per step: async lets the fast one run ahead (the servers
// see pulls far behind the applied steps); bounded s = 2 holds it at exactly s, counted by the
// servers themselves. With prefetched rows and a per-step compute well above a loopback pull,
// the fast worker's lookups and pushes never hold it up.
BOOST_AUTO_TEST_CASE(bounded_staleness_holds_exactly_and_async_runs_ahead_with_prefetch) {
  constexpr int kSteps = 12;
  const Tensor g = Tensor::full({2, kDim}, 0.1);
  std::vector<Tensor> batches;
  for (int step = 0; step <= kSteps; ++step) batches.push_back(ids({step % 7, 8, 9, 10, 11 + step % 3, 20}));
  for (auto update : {dp::UpdateMode::Async, dp::UpdateMode::Bounded}) {
    BOOST_TEST_CONTEXT(dp::update_mode_name(update)) {
      Servers ps(2, 2, update);
      std::vector<std::unique_ptr<dp::PsEmbeddingBag>> bags;
      for (int w = 0; w < 2; ++w) bags.push_back(std::make_unique<dp::PsEmbeddingBag>(options(ps.addresses, table("emb"), update, 2)));
      std::vector<std::string> errors(2);
      std::vector<std::thread> workers;
      for (int w = 0; w < 2; ++w)
        workers.emplace_back([&, w] {
          errors[static_cast<std::size_t>(w)] = error_of([&] {
            auto& bag = *bags[static_cast<std::size_t>(w)];
            for (int step = 0; step < kSteps; ++step) {
              bag.prefetch({batches[static_cast<std::size_t>(step + 1)]});
              std::this_thread::sleep_for(w == 1 ? 60ms : 25ms);   // this step's compute
              train_step(bag, batches[static_cast<std::size_t>(step)], g, w);
            }
            bag.flush();
          });
        });
      for (auto& th : workers) th.join();
      for (const auto& e : errors) BOOST_TEST(e == "(no error)");
      std::int64_t most = 0;
      for (const auto& shard : dp::PsClient(ps.addresses, kToken, 0, 5000ms).stats("emb")) {
        BOOST_TEST(shard.applied_through == kSteps - 1);
        most = std::max(most, shard.max_pull_staleness);
      }
      const auto& fast = bags[0]->traffic();
      if (update == dp::UpdateMode::Bounded) {
        BOOST_TEST(most == 2);   // reached (the fast worker runs into it) and never exceeded
      } else {
        BOOST_TEST(most > 4);    // nothing holds the fast worker back
        // Only step 0 pulled in its forward; every push found the one before it answered.
        BOOST_TEST(fast.lookup_waits.load() == 1);
        BOOST_TEST(fast.push_waits.load() == 0);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(a_layer_continues_after_the_servers_restart_from_their_folder) {
  const auto dir = std::filesystem::temp_directory_path() / ("pw_ps_bag_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const auto t = table("emb");
  const Tensor x = ids({1, 2, 3, 3, 4, 40}), g = Tensor::full({2, kDim}, 0.5);
  Tensor before;
  {
    Servers ps(2, 1, dp::UpdateMode::Sync, dir);
    dp::PsEmbeddingBag bag(options(ps.addresses, t, dp::UpdateMode::Sync));
    for (int step = 0; step < 3; ++step) train_step(bag, x, g);
    before = bag.forward(x, Mode::Eval).y;
  }
  {
    Servers ps(2, 1, dp::UpdateMode::Sync, dir);
    dp::PsEmbeddingBag bag(options(ps.addresses, t, dp::UpdateMode::Sync));
    BOOST_TEST(bag.next_step() == -1);   // nobody contacted yet
    auto out = bag.forward(x, Mode::Train);
    BOOST_TEST(bag.next_step() == 3);
    BOOST_TEST(close(out.y, before));
    bag.backward(*out.ctx, g);
    BOOST_CHECK_NO_THROW(bag.push_gradients(0, dp::RemoteGradients::Push));
    BOOST_TEST(bag.next_step() == 4);
  }
  std::filesystem::remove_all(dir);
}

// Layer::backward_input keeps the output gradient for backward_weight only when the layer has
// parameters; PsEmbeddingBag keeps its own, so a zero-bubble (Bi / Bw) backward pushes the same.
BOOST_AUTO_TEST_CASE(split_backward_pushes_what_a_full_backward_pushes) {
  const Tensor x = ids({1, 2, 3, 3, 4, 5}), g = Tensor::full({2, kDim}, 1.0);
  Servers full_ps(1, 1, dp::UpdateMode::Sync), split_ps(1, 1, dp::UpdateMode::Sync);
  dp::PsEmbeddingBag full(options(full_ps.addresses, table("emb"), dp::UpdateMode::Sync));
  dp::PsEmbeddingBag split(options(split_ps.addresses, table("emb"), dp::UpdateMode::Sync));
  train_step(full, x, g);
  const auto error = error_of([&] {
    auto out = split.forward(x, Mode::Train);
    split.backward_input(*out.ctx, g);
    split.backward_weight(*out.ctx);
    split.push_gradients(0, dp::RemoteGradients::Push);
  });
  BOOST_TEST(error == "(no error)");
  full.flush();   // pushes leave in the background
  split.flush();
  const std::vector<std::int64_t> keys = {1, 2, 3, 4, 5};
  BOOST_TEST(dp::PsClient(split_ps.addresses, kToken, 0, 5000ms).pull("emb", kDim, keys, 1, -1) ==
             dp::PsClient(full_ps.addresses, kToken, 0, 5000ms).pull("emb", kDim, keys, 1, -1));
}

// start() resumes at the servers' last *applied* step; a worker that had pushed a step the others
// had not (a job stopped mid-step) pushes it again, and the server takes the repeat as done.
BOOST_AUTO_TEST_CASE(a_job_stopped_mid_step_resumes) {
  Servers ps(1, 2, dp::UpdateMode::Sync);
  const auto t = table("emb");
  const Tensor x = ids({1, 2, 3}), g = Tensor::full({1, kDim}, 0.1);
  {
    dp::PsEmbeddingBag r0(options(ps.addresses, t, dp::UpdateMode::Sync)), r1(options(ps.addresses, t, dp::UpdateMode::Sync));
    train_step(r0, x, g, 0);
    train_step(r1, x, g, 1);
    train_step(r0, x, g, 0);   // worker 0 pushed step 1; the job stops before worker 1 does
  }
  std::vector<std::unique_ptr<dp::PsEmbeddingBag>> again;
  for (int r = 0; r < 2; ++r) {
    again.push_back(std::make_unique<dp::PsEmbeddingBag>(options(ps.addresses, t, dp::UpdateMode::Sync)));
    again.back()->forward(x, Mode::Eval);   // both connect before either pushes, as a job's workers would
  }
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] { errors[static_cast<std::size_t>(r)] = error_of([&] { train_step(*again[r], x, g, r); }); });
  for (auto& th : threads) th.join();
  for (const auto& e : errors) BOOST_TEST(e == "(no error)");
}

// A recomputed forward (a stage that recomputes, or chosen layers) reads the rows its forward read,
// though under asynchronous updates another worker's push changed them on the servers in between:
// its output is the forward's, bit for bit, so the layers after it rebuild the contexts the loss
// came from. Without prefetch (the rows pulled by the forward itself) and with it.
BOOST_AUTO_TEST_CASE(a_recomputed_forward_reads_the_rows_its_forward_read) {
  for (const bool prefetched : {false, true}) {
    BOOST_TEST_CONTEXT((prefetched ? "prefetched" : "pulled by the forward")) {
      Servers ps(1, 2, dp::UpdateMode::Async);
      const auto t = table("emb");
      dp::PsEmbeddingBag bag(options(ps.addresses, t, dp::UpdateMode::Async));
      bag.set_worker(0);
      const Tensor x = ids({3, 3, 3, 5, 7, 11});   // bag 0 is three times row 3
      if (prefetched) bag.prefetch({x});
      if (prefetched) bag.push_gradients(0, dp::RemoteGradients::Push);   // step 0 ends; the prefetch is step 1's
      const auto forward = bag.forward(x, Mode::Train);
      // Worker 1 moves every row the forward read.
      dp::PsClient other(ps.addresses, kToken, 1, 5000ms);
      other.push("emb", kDim, {3, 5, 7, 11}, std::vector<float>(4 * kDim, 1.0f), 0);
      const auto now = other.pull("emb", kDim, {3}, 1, -1);
      const auto rebuilt = bag.forward(x, Mode::Recompute);
      BOOST_TEST(rebuilt.y.to_float_vector() == forward.y.to_float_vector());
      // The servers' row did change: a fresh read of the next step differs.
      bag.backward(*forward.ctx, Tensor::full({2, kDim}, 0.0));
      bag.push_gradients(0, dp::RemoteGradients::Push);
      const auto later = bag.forward(ids({3, 3, 3}), Mode::Train);
      BOOST_TEST(std::abs(later.y.data<float>()[0] - 3 * now[0]) <= 1e-6);
      const auto first_bag = forward.y.to_float_vector();
      BOOST_TEST(later.y.to_float_vector() != std::vector<float>(first_bag.begin(), first_bag.begin() + kDim));
    }
  }
}

// A micro-batch with ids the step's prefetch lacks takes the prefetched rows for the others and
// pulls only the rest, which join the prefetched ones: its recomputed forward reads what it read,
// though worker 1 moved every row on the servers in between.
BOOST_AUTO_TEST_CASE(rows_a_prefetch_lacks_are_pulled_and_join_it) {
  Servers ps(1, 2, dp::UpdateMode::Async);
  dp::PsEmbeddingBag bag(options(ps.addresses, table("emb"), dp::UpdateMode::Async));
  bag.set_worker(0);
  bag.prefetch({ids({3, 5, 7})});
  bag.push_gradients(0, dp::RemoteGradients::Push);   // step 0 ends; the prefetch is step 1's
  const Tensor x = ids({3, 5, 40, 41, 7, 3});
  const auto forward = bag.forward(x, Mode::Train);   // takes the prefetch: its rows are counted by then
  BOOST_TEST(bag.traffic().prefetched_rows == 3);
  BOOST_TEST(bag.traffic().pulled_rows == 3 + 2);     // and 40 and 41
  dp::PsClient other(ps.addresses, kToken, 1, 5000ms);
  other.push("emb", kDim, {3, 5, 7, 40, 41}, std::vector<float>(5 * kDim, 1.0f), 0);
  BOOST_TEST(bag.forward(x, Mode::Recompute).y.to_float_vector() == forward.y.to_float_vector());
  BOOST_TEST(bag.traffic().pulled_rows == 3 + 2);
}

BOOST_AUTO_TEST_SUITE_END()
