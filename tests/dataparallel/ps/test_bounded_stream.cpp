// The test (16.3): a stream of 10 million distinct ids pushed through two shards of a
// table capped at 100,000 rows per shard keeps every shard at or under the cap after every push.
// Also what the admission sketch does with a stream of ids seen once: every id it admits is a
// false positive (counted and printed; bounded, not zero).
#include <cstdio>

#include <boost/test/unit_test.hpp>

#include "dataparallel/ps/shard.h"

using namespace pw;

namespace {

constexpr int kShards = 2, kDim = 4;
constexpr std::int64_t kCap = 100000;

struct Shards {
  explicit Shards(dp::TableBounds bounds) {
    dp::TableConfig c;
    c.name = "ids";
    c.dim = kDim;
    c.optimizer = dp::SparseOptimizerKind::Sgd;
    c.lr = 0.1;
    c.bounds = bounds;
    for (int s = 0; s < kShards; ++s) {
      dp::PsShardConfig sc;
      sc.shard = s;
      sc.shards = kShards;
      sc.mode = dp::UpdateMode::Async;
      shards.push_back(std::make_unique<dp::PsShard>(sc));
      shards.back()->create_table(c);
    }
  }
  // Ids first .. first + n - 1 as one worker step, each to its shard.
  void push(std::int64_t first, std::int64_t n, std::int64_t step) {
    std::vector<std::vector<std::int64_t>> keys(kShards);
    for (std::int64_t id = first; id < first + n; ++id) keys[static_cast<std::size_t>(dp::shard_of(id, kShards))].push_back(id);
    for (int s = 0; s < kShards; ++s) {
      const auto& k = keys[static_cast<std::size_t>(s)];
      const std::vector<float> g(k.size() * kDim, 0.5f);
      shards[static_cast<std::size_t>(s)]->push("ids", 0, step, k, g.data(), g.size());
    }
  }
  std::vector<std::unique_ptr<dp::PsShard>> shards;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(ps_bounded_stream)

BOOST_AUTO_TEST_CASE(ten_million_distinct_ids_keep_every_shard_at_or_under_a_100k_row_cap) {
  constexpr std::int64_t kIds = 10'000'000, kPerStep = 20'000;
  Shards t(dp::TableBounds{1, kCap, 0});
  std::int64_t step = 0;
  for (std::int64_t first = 0; first < kIds; first += kPerStep, ++step) {
    t.push(first, kPerStep, step);
    for (auto& s : t.shards) BOOST_REQUIRE_LE(s->stats("ids").rows, kCap);
  }
  std::int64_t admitted = 0;
  for (auto& s : t.shards) {
    const auto st = s->stats("ids");
    BOOST_TEST(st.rows == kCap);   // full: far more ids than room
    BOOST_TEST(st.peak_rows <= kCap);
    BOOST_TEST(st.admissions - st.evictions == st.rows);
    admitted += st.admissions;
  }
  BOOST_TEST(admitted == kIds);
}

BOOST_AUTO_TEST_CASE(ids_seen_once_are_rarely_admitted_when_rows_need_two_sightings) {
  constexpr std::int64_t kIds = 4'000'000, kPerStep = 20'000;
  Shards t(dp::TableBounds{2, kCap, 0});
  std::int64_t step = 0;
  for (std::int64_t first = 0; first < kIds; first += kPerStep, ++step) t.push(first, kPerStep, step);
  std::int64_t admitted = 0, dropped = 0;
  for (auto& s : t.shards) {
    const auto st = s->stats("ids");
    BOOST_TEST(st.rows <= kCap);
    admitted += st.admissions;
    dropped += st.dropped_rows;
  }
  BOOST_TEST(admitted + dropped == kIds);
  const double false_admissions = static_cast<double>(admitted) / static_cast<double>(kIds);
  std::printf("admit-after 2, %lld ids seen once over %d shards: %.4f admitted (false positives of the sketch)\n",
              static_cast<long long>(kIds), kShards, false_admissions);
  BOOST_TEST(false_admissions < 0.05);
}

BOOST_AUTO_TEST_SUITE_END()
