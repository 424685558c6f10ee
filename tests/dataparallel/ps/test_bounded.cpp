// Bounded parameter-server tables (issue 16, item 3): admission on the N-th sighting (with the
// dropped gradients counted), the LRU row cap after every update, TTL expiry, a shard restarted
// from its snapshot and write-ahead log (and one restored from a job checkpoint) carrying on
// exactly as the one that kept running, and bad bounds refused with one line.
#include <filesystem>
#include <random>
#include <sstream>

#include <boost/test/unit_test.hpp>

#include "core/error.h"
#include "dataparallel/ps/admission.h"
#include "dataparallel/ps/shard.h"
#include "dataparallel/ps/table.h"
#include "dataparallel/ps/wal.h"
#include "tests/dataparallel/ps/test_servers.h"

using namespace pw;
using pw::test::error_of;
namespace fs = std::filesystem;

namespace {

dp::TableConfig table(dp::TableBounds bounds, int dim = 2, dp::SparseOptimizerKind opt = dp::SparseOptimizerKind::Sgd) {
  dp::TableConfig c;
  c.name = "emb";
  c.dim = dim;
  c.optimizer = opt;
  c.lr = 0.5;
  c.init_seed = 3;
  c.init_scale = 0.25;
  c.bounds = bounds;
  return c;
}

std::vector<float> initial(const dp::TableConfig& c, std::int64_t key) {
  std::vector<float> row(static_cast<std::size_t>(c.dim));
  dp::initial_row(c, key, row.data());
  return row;
}

std::vector<float> pull(dp::ShardTable& t, std::int64_t key) {
  std::vector<float> row(static_cast<std::size_t>(t.config().dim));
  t.pull(&key, 1, row.data());
  return row;
}

// One gradient row of ones per key, applied as the update of `step`.
void apply(dp::ShardTable& t, std::vector<std::int64_t> keys, std::int64_t step, dp::ApplyEffects* fx = nullptr) {
  const std::vector<float> g(keys.size() * static_cast<std::size_t>(t.config().dim), 1.0f);
  t.apply(keys.data(), keys.size(), g.data(), step, nullptr, fx);
}

struct TempFolder {
  explicit TempFolder(const std::string& tag)
      : path(fs::temp_directory_path() / ("pw_ps_bounded_" + tag + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempFolder() {
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  fs::path path;
};

// Pushes of a deterministic stream: worker w's keys of `step` (some repeated from step to step,
// some new), gradients that differ per worker, step and key.
struct Stream {
  std::vector<std::int64_t> keys(int w, std::int64_t step) const {
    std::mt19937_64 rng(static_cast<std::uint64_t>(step * 31 + w));
    std::vector<std::int64_t> k;
    for (int i = 0; i < 12; ++i) k.push_back(static_cast<std::int64_t>(rng() % 60));   // hot ids
    for (int i = 0; i < 4; ++i) k.push_back(1000 + (step / 2) * 8 + w * 4 + i);   // new ids, two steps each
    std::sort(k.begin(), k.end());
    k.erase(std::unique(k.begin(), k.end()), k.end());
    return k;
  }
  std::vector<float> grads(int w, std::int64_t step, std::size_t n, int dim) const {
    std::vector<float> g(n * static_cast<std::size_t>(dim));
    for (std::size_t i = 0; i < g.size(); ++i) g[i] = 0.01f * static_cast<float>((i * 7 + step * 3 + w) % 11) - 0.05f;
    return g;
  }
  void push(dp::PsShard& shard, int workers, std::int64_t from, std::int64_t to, int dim) const {
    for (std::int64_t s = from; s < to; ++s)
      for (int w = 0; w < workers; ++w) {
        const auto k = keys(w, s);
        const auto g = grads(w, s, k.size(), dim);
        shard.push("emb", w, s, k, g.data(), g.size());
      }
  }
};

void require_same(dp::PsShard& a, dp::PsShard& b, int dim) {
  const auto sa = a.stats("emb"), sb = b.stats("emb");
  BOOST_TEST(sa.rows == sb.rows);
  BOOST_TEST(sa.admissions == sb.admissions);
  BOOST_TEST(sa.dropped_rows == sb.dropped_rows);
  BOOST_TEST(sa.evictions == sb.evictions);
  BOOST_TEST(sa.expirations == sb.expirations);
  BOOST_TEST(sa.peak_rows == sb.peak_rows);
  BOOST_TEST(sa.applied_through == sb.applied_through);
  std::vector<std::int64_t> every;
  for (std::int64_t k = 0; k < 60; ++k) every.push_back(k);
  for (std::int64_t k = 1000; k < 1000 + 8 * 200; ++k) every.push_back(k);
  const auto ra = a.pull("emb", every, -1, -1, {}), rb = b.pull("emb", every, -1, -1, {});
  BOOST_TEST(ra == rb);   // bitwise
  (void)dim;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ps_bounded)

BOOST_AUTO_TEST_CASE(an_id_gets_a_row_on_its_nth_sighting_and_earlier_gradients_are_dropped_and_counted) {
  const auto c = table({3, 0, 0});
  dp::ShardTable t(c);
  const std::int64_t key = 42;
  apply(t, {key}, 0);
  apply(t, {key, 7}, 1);
  BOOST_TEST(t.rows() == 0);
  BOOST_TEST(!t.holds(key));
  BOOST_TEST(pull(t, key) == initial(c, key));   // not admitted: the id's initial row
  BOOST_TEST(t.counts().dropped == 3);
  dp::ApplyEffects fx;
  apply(t, {key}, 2, &fx);   // the third sighting: the row is made and this gradient applied
  BOOST_TEST(t.holds(key));
  BOOST_TEST(fx.admitted == std::vector<std::int64_t>{key});
  auto want = initial(c, key);
  for (auto& v : want) v -= 0.5f * 1.0f;
  BOOST_TEST(pull(t, key) == want);
  apply(t, {key}, 3);   // stored now: updated, nothing dropped
  for (auto& v : want) v -= 0.5f;
  BOOST_TEST(pull(t, key) == want);
  const auto n = t.counts();
  BOOST_TEST(n.admissions == 1);
  BOOST_TEST(n.dropped == 3);   // two of key 42, one of key 7
  BOOST_TEST(!t.holds(7));
}

BOOST_AUTO_TEST_CASE(sync_mode_counts_every_workers_push_as_a_sighting) {
  dp::PsShardConfig sc;
  sc.workers = 2;
  sc.mode = dp::UpdateMode::Sync;
  dp::PsShard shard(sc);
  const auto c = table({3, 0, 0});
  shard.create_table(c);
  const std::vector<std::int64_t> k = {5};
  const std::vector<float> g0 = {1.0f, 2.0f}, g1 = {10.0f, 20.0f};
  const std::vector<std::int64_t> none;
  shard.push("emb", 0, 0, k, g0.data(), 2);
  shard.push("emb", 1, 0, k, g1.data(), 2);   // two sightings in step 0: both dropped
  BOOST_TEST(shard.stats("emb").rows == 0);
  BOOST_TEST(shard.stats("emb").dropped_rows == 2);
  shard.push("emb", 0, 1, k, g0.data(), 2);   // the third sighting
  shard.push("emb", 1, 1, none, nullptr, 0);
  const auto s = shard.stats("emb");
  BOOST_TEST(s.rows == 1);
  BOOST_TEST(s.admissions == 1);
  BOOST_TEST(s.dropped_rows == 2);
  auto want = initial(c, 5);
  want[0] -= 0.5f * 1.0f;
  want[1] -= 0.5f * 2.0f;
  BOOST_TEST(shard.pull("emb", k, -1, -1, {}) == want);
}

BOOST_AUTO_TEST_CASE(the_least_recently_updated_row_leaves_and_the_cap_holds_after_every_update) {
  dp::ShardTable t(table({1, 3, 0}));
  apply(t, {1}, 0);
  apply(t, {2}, 1);
  apply(t, {3}, 2);
  apply(t, {1}, 3);   // 1 is now the newest; 2 the least recently updated
  BOOST_TEST(t.rows() == 3);
  dp::ApplyEffects fx;
  apply(t, {4}, 4, &fx);
  BOOST_TEST(fx.evicted == std::vector<std::int64_t>{2});
  BOOST_TEST(t.holds(1));
  BOOST_TEST(!t.holds(2));
  BOOST_TEST(t.holds(3));
  BOOST_TEST(t.holds(4));
  BOOST_TEST(t.rows() == 3);
  // A push of more new ids than the cap: the shard never holds more than 3, not even within it.
  apply(t, {10, 11, 12, 13, 14}, 5);
  BOOST_TEST(t.rows() == 3);
  for (std::int64_t k : {12, 13, 14}) BOOST_TEST(t.holds(k));
  const auto n = t.counts();
  BOOST_TEST(n.evictions == 6);   // 2, then 3, 1, 4, 10, 11
  BOOST_TEST(n.peak_rows == 3);
  BOOST_TEST(n.admissions == 9);
  // An evicted id comes back from its initial row.
  BOOST_TEST(pull(t, 2) == initial(t.config(), 2));

  std::mt19937_64 rng(5);
  dp::ShardTable big(table({1, 50, 0}));
  for (std::int64_t step = 0; step < 200; ++step) {
    std::vector<std::int64_t> keys;
    for (int i = 0; i < 20; ++i) keys.push_back(static_cast<std::int64_t>(rng() % 400));
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    apply(big, keys, step);
    BOOST_REQUIRE(big.rows() <= 50);
    for (auto k : keys) BOOST_REQUIRE(big.holds(k));   // the newest rows are the ones just updated
  }
  BOOST_TEST(big.counts().peak_rows == 50);
  BOOST_TEST(big.counts().admissions - big.counts().evictions == big.rows());
}

BOOST_AUTO_TEST_CASE(rows_untouched_for_the_ttl_expire_and_the_cap_and_ttl_combine) {
  dp::ShardTable t(table({1, 0, 2}));
  apply(t, {1}, 0);
  apply(t, {2}, 1);
  dp::ApplyEffects fx;
  apply(t, {2}, 2, &fx);   // row 1 has gone steps 1 and 2 without an update
  BOOST_TEST(fx.expired == std::vector<std::int64_t>{1});
  BOOST_TEST(!t.holds(1));
  BOOST_TEST(t.holds(2));
  apply(t, {}, 3);   // a step with no ids for this shard still moves the clock
  BOOST_TEST(t.holds(2));
  apply(t, {}, 4);
  BOOST_TEST(!t.holds(2));
  BOOST_TEST(t.counts().expirations == 2);
  BOOST_TEST(t.counts().evictions == 0);

  dp::ShardTable both(table({2, 2, 3}));
  apply(both, {1, 2}, 0);   // first sightings: dropped
  apply(both, {1, 2, 3}, 1);
  BOOST_TEST(both.rows() == 2);
  apply(both, {3}, 2);   // 3 admitted; the cap evicts 1
  BOOST_TEST(both.rows() == 2);
  BOOST_TEST(both.counts().evictions == 1);
  apply(both, {}, 4);   // 2 was last updated at step 1: expired
  BOOST_TEST(!both.holds(2));
  BOOST_TEST(both.holds(3));
  BOOST_TEST(both.counts().expirations == 1);
}

BOOST_AUTO_TEST_CASE(a_table_written_and_read_back_has_the_same_rows_recency_counters_and_sketch) {
  for (auto bounds : {dp::TableBounds{2, 30, 0}, dp::TableBounds{1, 0, 4}, dp::TableBounds{3, 25, 6}, dp::TableBounds{}}) {
    const auto c = table(bounds, 3, dp::SparseOptimizerKind::Adam);
    dp::ShardTable live(c), copy(c);
    std::mt19937_64 rng(9);
    for (std::int64_t step = 0; step < 60; ++step) {
      std::vector<std::int64_t> keys;
      for (int i = 0; i < 10; ++i) keys.push_back(static_cast<std::int64_t>(rng() % 100));
      std::sort(keys.begin(), keys.end());
      keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
      apply(live, keys, step);
      if (step == 40) {
        std::stringstream bytes;
        live.write(bytes);
        copy.read(bytes, "snapshot");
        BOOST_TEST(copy.same_state(live));
      } else if (step > 40) {
        apply(copy, keys, step);
      }
    }
    BOOST_TEST(copy.same_state(live), dp::describe_bounds(bounds));
  }
  // A snapshot from a larger cap does not fit a table with a smaller one.
  dp::ShardTable wide(table({1, 10, 0})), narrow(table({1, 5, 0}));
  apply(wide, {1, 2, 3, 4, 5, 6, 7}, 0);
  std::stringstream bytes;
  wide.write(bytes);
  BOOST_TEST(error_of([&] { narrow.read(bytes, "s.snap"); }).find("s.snap holds 7 rows; table 'emb' keeps at most 5") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_restarted_shard_replays_its_log_to_exactly_the_table_it_had) {
  for (auto mode : {dp::UpdateMode::Async, dp::UpdateMode::Sync}) {
    TempFolder live_dir("live"), copy_dir("copy");
    dp::PsShardConfig sc;
    sc.workers = 2;
    sc.mode = mode;
    sc.dir = live_dir.path.string();
    sc.snapshot_every = 7;   // snapshots part-way, and log records after the last one
    const auto c = table({2, 40, 3}, 4, dp::SparseOptimizerKind::Adagrad);
    Stream stream;
    dp::PsShard live(sc);
    live.create_table(c);
    stream.push(live, 2, 0, 45, c.dim);
    BOOST_TEST(live.stats("emb").evictions > 0);
    BOOST_TEST(live.stats("emb").expirations > 0);
    BOOST_TEST(live.stats("emb").dropped_rows > 0);
    // The log holds what the pushes did, after each one.
    int effects = 0;
    dp::PsWriteAheadLog::replay((live_dir.path / "emb.shard0.wal").string(), c.dim, 1 << 20,
                                [&](const dp::PsLogRecord& r) {
                                  effects += r.kind == dp::PsLogRecord::Kind::Effects;
                                  return true;
                                });
    BOOST_TEST(effects > 0);
    // The folder as a server killed now would leave it (every push is in the log when acknowledged).
    fs::copy(live_dir.path, copy_dir.path, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    auto again = sc;
    again.dir = copy_dir.path.string();
    dp::PsShard restarted(again);
    require_same(live, restarted, c.dim);
    // And both carry on alike: the same recency order and the same sketch.
    stream.push(live, 2, 45, 70, c.dim);
    stream.push(restarted, 2, 45, 70, c.dim);
    require_same(live, restarted, c.dim);
    BOOST_TEST(live.stats("emb").peak_rows <= 40);
  }
}

BOOST_AUTO_TEST_CASE(a_job_checkpoint_restores_the_bounded_table_and_its_counters) {
  TempFolder folder("job");
  dp::PsShardConfig sc;
  sc.workers = 2;
  sc.mode = dp::UpdateMode::Bounded;
  const auto c = table({2, 30, 5}, 4, dp::SparseOptimizerKind::Adam);
  Stream stream;
  dp::PsShard live(sc);
  live.create_table(c);
  stream.push(live, 2, 0, 30, c.dim);
  live.checkpoint(folder.path.string(), 30, std::chrono::steady_clock::now() + std::chrono::seconds(5));
  dp::PsShard restored(sc);
  restored.restore(folder.path.string());
  require_same(live, restored, c.dim);
  stream.push(live, 2, 30, 50, c.dim);
  stream.push(restored, 2, 30, 50, c.dim);
  require_same(live, restored, c.dim);
  BOOST_TEST(live.stats("emb").evictions > 0);

  // A server started for other bounds refuses the checkpoint's table.
  auto other = sc;
  other.bounds = dp::TableBounds{2, 31, 5};
  dp::PsShard strict(other);
  BOOST_TEST(error_of([&] { strict.restore(folder.path.string()); }).find("this server was started for admit after 2, "
                                                                          "at most 31 rows per shard") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(bad_bounds_and_bounds_other_than_the_servers_are_refused_with_one_line) {
  auto message = [](dp::TableBounds b) { return error_of([&] { dp::check_table_config(table(b)); }); };
  BOOST_TEST(message({0, 0, 0}) == "table 'emb': admit after 0 sightings; expected 1 to 255 (1: every id at once)");
  BOOST_TEST(message({256, 0, 0}).find("expected 1 to 255") != std::string::npos);
  BOOST_TEST(message({1, -5, 0}) == "table 'emb': a cap of -5 rows per shard; expected a positive count (0: no cap)");
  BOOST_TEST(message({1, 0, -1}) ==
             "table 'emb': a row time-to-live of -1 steps; expected a positive count (0: rows never expire)");

  dp::PsShardConfig sc;
  sc.bounds = dp::TableBounds{1, 100, 0};
  dp::PsShard shard(sc);
  const auto e = error_of([&] { shard.create_table(table({2, 100, 0})); });
  BOOST_TEST(e == "table 'emb' asks for admit after 2, at most 100 rows per shard, rows never expire; this server was "
                  "started for admit after 1, at most 100 rows per shard, rows never expire");
  shard.create_table(table({1, 100, 0}));
  dp::PsShard open_shard(dp::PsShardConfig{});
  open_shard.create_table(table({1, 100, 0}));
  BOOST_TEST(error_of([&] { open_shard.create_table(table({1, 200, 0})); }).find("exists with another definition") !=
             std::string::npos);
}

BOOST_AUTO_TEST_CASE(the_sketch_never_admits_late_and_forgets_half_of_old_sightings) {
  dp::AdmissionSketch sketch(1024);
  for (int i = 1; i <= 5; ++i) BOOST_TEST(sketch.add(77, 1) >= i);
  // After `width` sightings the counters are halved.
  for (std::int64_t k = 0; k < 1019; ++k) sketch.add(100000 + k, 1);
  BOOST_TEST(sketch.halvings() == 1u);
  BOOST_TEST(sketch.estimate(77) >= 2);
  BOOST_TEST(sketch.estimate(77) <= 3);
}

BOOST_AUTO_TEST_SUITE_END()
