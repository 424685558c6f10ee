// Topology, Gloo collectives and the bucketed gradient reducer, with replicas as threads.
#include <cmath>
#include <random>

#include <boost/test/unit_test.hpp>

#include "dataparallel/bucket_reducer.h"
#include "dataparallel/buffer_broadcast.h"
#include "dataparallel/gloo_collective.h"
#include "dataparallel/run_per_rank.h"
#include "dataparallel/topology.h"

using namespace pw;
using namespace std::chrono_literals;

namespace {

rpc::Deadline in(std::chrono::milliseconds ms) { return std::chrono::steady_clock::now() + ms; }

// `count` members of one Gloo group, connected concurrently.
std::vector<std::shared_ptr<dp::GlooCollective>> group(rpc::Store& store, int count, const std::string& name,
                                                         std::chrono::milliseconds timeout = 10000ms) {
  std::vector<std::shared_ptr<dp::GlooCollective>> members(static_cast<std::size_t>(count));
  dp::run_per_rank(count, [&](int r) {
    members[static_cast<std::size_t>(r)] =
        std::make_shared<dp::GlooCollective>(r, count, store, name + "/", "127.0.0.1", timeout);
  });
  return members;
}

// Parameters with gradients filled from `seed`, 3 tensors of different sizes.
struct FakeStage {
  explicit FakeStage(std::uint64_t seed) {
    std::mt19937 rng(static_cast<unsigned>(seed));
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (std::int64_t n : {1000, 37, 5000}) {
      auto p = std::make_unique<models::Parameter>();
      p->name = "p" + std::to_string(n);
      std::vector<float> g(static_cast<std::size_t>(n));
      for (auto& x : g) x = u(rng);
      p->value = kernels::Tensor::zeros({n});
      p->grad = kernels::Tensor::from_vector(g, {n});
      params.push_back(std::move(p));
    }
  }
  std::vector<models::Parameter*> pointers() {
    std::vector<models::Parameter*> out;
    for (auto& p : params) out.push_back(p.get());
    return out;
  }
  std::vector<std::unique_ptr<models::Parameter>> params;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(topology)

BOOST_AUTO_TEST_CASE(ranks_on_a_stage_by_replica_grid) {
  const dp::Topology t(3, 2);
  BOOST_TEST(t.world_size() == 6);
  BOOST_TEST(t.rank_of(2, 1) == 5);
  BOOST_TEST(t.stage_of(4) == 1);
  BOOST_TEST(t.replica_of(4) == 1);
  BOOST_TEST(t.stage_group(1) == std::vector<int>({1, 4}));
  BOOST_TEST(t.grid().find("replica 1") != std::string::npos, t.grid());
  BOOST_CHECK_THROW(dp::Topology(0, 2), InputError);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(gloo_collective)

BOOST_AUTO_TEST_CASE(allreduce_sums_and_broadcast_copies_the_root) {
  rpc::InMemoryStore store;
  auto members = group(store, 3, "g");
  std::vector<kernels::Tensor> data;
  for (int r = 0; r < 3; ++r)
    data.push_back(kernels::Tensor::from_vector(std::vector<float>{float(r), float(2 * r), 1.0f}, {3}));
  dp::run_per_rank(3, [&](int r) { members[r]->allreduce_sum(data[r], dp::Compression::None); });
  for (int r = 0; r < 3; ++r) BOOST_TEST(data[r].to_float_vector() == std::vector<float>({3, 6, 3}));
  std::vector<kernels::Tensor> b;
  for (int r = 0; r < 3; ++r) b.push_back(kernels::Tensor::full({4}, 10.0 + r));
  dp::run_per_rank(3, [&](int r) { members[r]->broadcast(b[r], 1); });
  for (int r = 0; r < 3; ++r) BOOST_TEST(b[r].to_float_vector() == std::vector<float>(4, 11.0f));
}

// A stage's buffers of two dtypes and several sizes (an empty one too) reach every member from the
// root in one call per dtype, exactly, each in its own place.
BOOST_AUTO_TEST_CASE(buffers_broadcast_packed_per_dtype) {
  rpc::InMemoryStore store;
  auto members = group(store, 3, "buffers");
  std::vector<std::vector<models::Buffer>> held(3);
  for (int r = 0; r < 3; ++r) {
    auto& mine = held[static_cast<std::size_t>(r)];
    mine.push_back({"a", kernels::Tensor::full({5}, 0.1 * (r + 1)), {}});
    mine.push_back({"count", kernels::Tensor::from_vector(std::vector<std::int64_t>{7 + r, 1000000007LL * (r + 1)}, {2}), {}});
    mine.push_back({"empty", kernels::Tensor::zeros({0}), {}});
    mine.push_back({"b", kernels::Tensor::full({2, 3}, -2.5 * (r + 1)), {}});
  }
  dp::run_per_rank(3, [&](int r) {
    std::vector<models::Buffer*> mine;
    for (auto& b : held[static_cast<std::size_t>(r)]) mine.push_back(&b);
    dp::broadcast_buffers(*members[static_cast<std::size_t>(r)], mine, 2);
  });
  for (int r = 0; r < 3; ++r) {
    const auto& mine = held[static_cast<std::size_t>(r)];
    BOOST_TEST_CONTEXT("member " << r) {
      BOOST_TEST(mine[0].value.to_float_vector() == std::vector<float>(5, static_cast<float>(0.1 * 3)));
      BOOST_TEST(mine[1].value.to_double_vector() == std::vector<double>({9.0, 3000000021.0}));
      BOOST_TEST(mine[2].value.numel() == 0);
      BOOST_TEST(mine[3].value.to_float_vector() == std::vector<float>(6, -7.5f));
    }
  }
}

BOOST_AUTO_TEST_CASE(a_missing_member_times_out_naming_the_group) {
  rpc::InMemoryStore store;
  try {
    dp::GlooCollective alone(0, 2, store, "lonely/", "127.0.0.1", 300ms);
    BOOST_FAIL("expected a timeout");
  } catch (const rpc::TimeoutError& e) {
    BOOST_TEST(std::string(e.what()).find("Gloo group 'lonely/'") != std::string::npos, e.what());
  }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(bucket_reducer)

BOOST_AUTO_TEST_CASE(every_replica_ends_with_the_mean_gradient_in_any_bucket_size) {
  for (std::size_t bucket_bytes : {std::size_t{64}, std::size_t{4096}, std::size_t{1} << 20}) {
    BOOST_TEST_CONTEXT("bucket " << bucket_bytes) {
      rpc::InMemoryStore store;
      auto members = group(store, 2, "b" + std::to_string(bucket_bytes));
      FakeStage a(1), b(2);
      std::vector<std::vector<float>> expected;
      for (std::size_t i = 0; i < a.params.size(); ++i) {
        auto x = a.params[i]->grad.to_float_vector();
        const auto y = b.params[i]->grad.to_float_vector();
        for (std::size_t k = 0; k < x.size(); ++k) x[k] = (x[k] + y[k]) / 2;
        expected.push_back(x);
      }
      dp::BucketReducer ra(a.pointers(), members[0], {bucket_bytes, dp::Compression::None});
      dp::BucketReducer rb(b.pointers(), members[1], {bucket_bytes, dp::Compression::None});
      if (bucket_bytes == 64) BOOST_TEST(ra.bucket_count() == 3u);   // one parameter per bucket
      if (bucket_bytes == (std::size_t{1} << 20)) BOOST_TEST(ra.bucket_count() == 1u);
      dp::run_per_rank(2, [&](int r) {
        auto& reducer = r == 0 ? ra : rb;
        auto& stage = r == 0 ? a : b;
        reducer.start_step(0);
        // Backward order: the last parameter's gradient is final first.
        for (auto it = stage.params.rbegin(); it != stage.params.rend(); ++it) reducer.ready(it->get());
        reducer.finish(in(10000ms));
      });
      for (std::size_t i = 0; i < a.params.size(); ++i) {
        const auto x = a.params[i]->grad.to_float_vector();
        const auto y = b.params[i]->grad.to_float_vector();
        BOOST_TEST(x == y);   // bit-identical on every replica
        for (std::size_t k = 0; k < x.size(); ++k) BOOST_REQUIRE_CLOSE(x[k], expected[i][k], 1e-4);
      }
      // Each gradient starts on a 256-byte (64-float) boundary of its bucket.
      BOOST_TEST(ra.stats().bytes == (1024 + 64 + 5056) * 4);
    }
  }
}

// Sharded optimizer state: the replicas' update shares cover every element of every parameter
// once, each replica's share holds the mean gradient (the all-reduce's bits with 2 replicas),
// a parameter named `tied` is sharded in a bucket of its own (so its segments are the same
// elements on every stage holding it), and the weight gather gives every replica each owner's
// weights.
BOOST_AUTO_TEST_CASE(sharded_buckets_leave_each_owner_its_slices_and_gather_the_weights) {
  for (const int replicas : {2, 3}) {
    BOOST_TEST_CONTEXT(replicas << " replicas") {
      rpc::InMemoryStore store;
      auto members = group(store, replicas, "shard" + std::to_string(replicas));
      std::vector<std::unique_ptr<FakeStage>> stages;
      for (int r = 0; r < replicas; ++r) stages.push_back(std::make_unique<FakeStage>(10 + r));
      std::vector<std::vector<double>> mean;
      for (std::size_t i = 0; i < 3; ++i) {
        std::vector<double> m(static_cast<std::size_t>(stages[0]->params[i]->grad.numel()), 0.0);
        for (auto& st : stages) {
          const auto g = st->params[i]->grad.to_float_vector();
          for (std::size_t k = 0; k < m.size(); ++k) m[k] += g[k] / replicas;
        }
        mean.push_back(m);
      }
      std::vector<std::unique_ptr<dp::BucketReducer>> reducers;
      for (int r = 0; r < replicas; ++r) {
        auto& st = *stages[static_cast<std::size_t>(r)];
        reducers.push_back(std::make_unique<dp::BucketReducer>(
            st.pointers(), members[static_cast<std::size_t>(r)],
            dp::BucketOptions{4096, dp::Compression::None, dp::OptimizerState::Sharded}, dp::TraceTrack{},
            std::vector<models::Parameter*>{st.params[1].get()}));
      }
      dp::run_per_rank(replicas, [&](int r) {
        auto& reducer = *reducers[static_cast<std::size_t>(r)];
        reducer.start_step(0);
        for (auto it = stages[static_cast<std::size_t>(r)]->params.rbegin();
             it != stages[static_cast<std::size_t>(r)]->params.rend(); ++it)
          reducer.ready(it->get());
        reducer.finish(in(10000ms));
      });
      // p5000 fills a bucket; p37, tied, takes one alone, where p1000 would otherwise have joined it.
      BOOST_TEST(reducers[0]->bucket_count() == 3u);
      std::vector<std::vector<int>> covered;
      for (std::size_t i = 0; i < 3; ++i) covered.emplace_back(mean[i].size(), 0);
      for (int r = 0; r < replicas; ++r) {
        auto& st = *stages[static_cast<std::size_t>(r)];
        const auto share = reducers[static_cast<std::size_t>(r)]->update_share();
        BOOST_REQUIRE(share.has_value());
        BOOST_TEST(share->whole.empty());
        for (const auto& slice : share->owned) {
          std::size_t i = 0;
          while (st.params[i].get() != slice.parameter) ++i;
          const auto g = slice.parameter->grad.to_float_vector();
          for (std::int64_t k = slice.offset; k < slice.offset + slice.length; ++k) {
            ++covered[i][static_cast<std::size_t>(k)];
            BOOST_REQUIRE_SMALL(g[static_cast<std::size_t>(k)] - mean[i][static_cast<std::size_t>(k)], 1e-6);
          }
          // The owner writes its slice of the weights: its replica number.
          auto w = slice.parameter->value.view(slice.offset, {slice.length});
          w.copy_from(kernels::Tensor::full({slice.length}, static_cast<double>(r)));
        }
      }
      for (std::size_t i : {0u, 1u, 2u})
        for (int c : covered[i]) BOOST_REQUIRE_EQUAL(c, 1);
      dp::run_per_rank(replicas, [&](int r) {
        reducers[static_cast<std::size_t>(r)]->start_gathering_weights();
        reducers[static_cast<std::size_t>(r)]->await_all_weights(in(10000ms));
      });
      // Every replica now holds every owner's slices.
      for (int r = 0; r < replicas; ++r)
        for (int owner = 0; owner < replicas; ++owner) {
          const auto share = reducers[static_cast<std::size_t>(owner)]->update_share();
          for (const auto& slice : share->owned) {
            std::size_t i = 0;
            auto& owner_stage = *stages[static_cast<std::size_t>(owner)];
            while (owner_stage.params[i].get() != slice.parameter) ++i;
            const auto w = stages[static_cast<std::size_t>(r)]->params[i]->value.to_float_vector();
            for (std::int64_t k = slice.offset; k < slice.offset + slice.length; ++k)
              BOOST_REQUIRE_EQUAL(w[static_cast<std::size_t>(k)], static_cast<float>(owner));
          }
        }
    }
  }
}

BOOST_AUTO_TEST_CASE(fp16_compression_has_bounded_error) {
  rpc::InMemoryStore store;
  auto members = group(store, 2, "fp16");
  FakeStage a(3), b(4), ref_a(3), ref_b(4);
  dp::BucketReducer ra(a.pointers(), members[0], {1 << 20, dp::Compression::Fp16});
  dp::BucketReducer rb(b.pointers(), members[1], {1 << 20, dp::Compression::Fp16});
  dp::run_per_rank(2, [&](int r) {
    auto& reducer = r == 0 ? ra : rb;
    reducer.start_step(0);
    reducer.finish(in(10000ms));   // finish() marks everything final itself
  });
  double worst = 0.0;
  for (std::size_t i = 0; i < a.params.size(); ++i) {
    const auto got = a.params[i]->grad.to_float_vector();
    const auto x = ref_a.params[i]->grad.to_float_vector();
    const auto y = ref_b.params[i]->grad.to_float_vector();
    for (std::size_t k = 0; k < got.size(); ++k) {
      const double exact = (static_cast<double>(x[k]) + y[k]) / 2;
      worst = std::max(worst, std::abs(got[k] - exact));
    }
  }
  // Inputs in [-1, 1]: each fp16 rounding is at most 2^-11 relative, the sum of two below 2.
  BOOST_TEST(worst <= 2e-3, "worst absolute error " << worst);
  BOOST_TEST(worst > 0.0);   // it really was compressed
}

BOOST_AUTO_TEST_CASE(a_silent_replica_makes_finish_time_out_and_abort_cancels_the_reduction) {
  rpc::InMemoryStore store;
  auto members = group(store, 2, "late", 30000ms);
  FakeStage a(5);
  auto ra = std::make_unique<dp::BucketReducer>(a.pointers(), members[0], dp::BucketOptions{1 << 20, dp::Compression::None});
  ra->start_step(0);
  BOOST_CHECK_THROW(ra->finish(in(300ms)), rpc::TimeoutError);
  // The reduction is stuck waiting for member 1; an abort must end it now, not in 30 s.
  const auto t0 = std::chrono::steady_clock::now();
  ra->abort("replica 1 failed");
  BOOST_CHECK_THROW(ra->finish(in(300ms)), rpc::AbortedError);
  ra->start_step(1);   // an aborted reducer stays aborted
  BOOST_CHECK_THROW(ra->finish(in(300ms)), rpc::AbortedError);
  ra.reset();
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  BOOST_TEST(took < 5.0, "the aborted reducer took " << took << " s to stop");
}

BOOST_AUTO_TEST_SUITE_END()
