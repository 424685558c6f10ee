// reduce_scatter_sum and all_gather (the sharded optimizer's collectives) on every CPU backend —
// Gloo, the job's links, and the host-staged wrapper — checked against the same backend's
// all-reduce: with 2 members a sum of two floats does not depend on its order, so the owned
// segment equals the all-reduce's bit for bit; with 3 and 4 members the orders differ and the
// segment is checked against the exact sum in double.
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include <boost/test/unit_test.hpp>

#include "../rpc/rpc_test_world.h"
#include "dataparallel/gloo_collective.h"
#include "dataparallel/host_staged_collective.h"
#include "dataparallel/link_collective.h"
#include "dataparallel/run_per_rank.h"
#include "kernels/half_float.h"
#include "rpc/in_process_transport.h"
#include "rpc/store.h"

using namespace pw;
using namespace std::chrono_literals;
using kernels::DType;
using kernels::Tensor;

namespace {

enum class Backend { Gloo, Links, HostStaged };

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::Gloo: return "gloo";
    case Backend::Links: return "links";
    case Backend::HostStaged: return "host-staged";
  }
  return "?";
}

// `members` collectives of one backend, their members threads of this process.
struct Group {
  Group(Backend backend, int members, dp::GlooCollectiveOptions gloo_options = {}) : hub(members) {
    for (int r = 0; r < members; ++r) transports.push_back(hub.endpoint(r));
    std::vector<int> ranks;
    for (int r = 0; r < members; ++r) ranks.push_back(r);
    collectives.resize(static_cast<std::size_t>(members));
    dp::run_per_rank(members, [&](int r) {
      std::unique_ptr<dp::Collective> c;
      if (backend == Backend::Links) {
        // Small chunks: segments travel as several messages.
        c = std::make_unique<dp::LinkCollective>(*transports[static_cast<std::size_t>(r)], ranks, "shard/", 30000ms,
                                                 dp::LinkCollectiveOptions{256});
      } else {
        c = std::make_unique<dp::GlooCollective>(r, members, store, "shard/", "127.0.0.1", 30000ms, gloo_options);
        // The staged collective copies from its device to the host and back: cpu:1 is another device.
        if (backend == Backend::HostStaged)
          c = std::make_unique<dp::HostStagedCollective>(std::move(c), kernels::Device::cpu(1));
      }
      collectives[static_cast<std::size_t>(r)] = std::move(c);
    });
  }
  int size() const { return static_cast<int>(collectives.size()); }
  dp::Collective& operator[](int r) { return *collectives[static_cast<std::size_t>(r)]; }

  rpc::InMemoryStore store;
  rpc::InProcessHub hub;
  std::vector<std::unique_ptr<rpc::Transport>> transports;
  std::vector<std::unique_ptr<dp::Collective>> collectives;
};

kernels::Device device_of(Backend b) { return b == Backend::HostStaged ? kernels::Device::cpu(1) : kernels::Device::cpu(0); }

std::vector<Tensor> random_inputs(int members, std::int64_t n, unsigned seed, kernels::Device device) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<Tensor> out;
  for (int m = 0; m < members; ++m) {
    std::vector<float> v(static_cast<std::size_t>(n));
    for (auto& x : v) x = u(rng);
    out.push_back(Tensor::from_vector(v, {n}).to(device));
  }
  return out;
}

std::vector<float> host_values(const Tensor& t) {
  const Tensor h = t.to(kernels::Device::cpu(0));
  std::vector<float> v(static_cast<std::size_t>(h.numel()));
  if (!v.empty()) std::memcpy(v.data(), h.raw(), h.nbytes());
  return v;
}

// Runs `op` on every member's copy of `inputs`; returns the members' results.
std::vector<Tensor> run(Group& g, const std::vector<Tensor>& inputs, const std::function<void(dp::Collective&, Tensor&)>& op) {
  std::vector<Tensor> data;
  for (const auto& t : inputs) data.push_back(t.clone());
  dp::run_per_rank(g.size(), [&](int m) { op(g[m], data[static_cast<std::size_t>(m)]); });
  return data;
}

const Backend kBackends[] = {Backend::Gloo, Backend::Links, Backend::HostStaged};

}  // namespace

BOOST_AUTO_TEST_SUITE(shard_collectives)

BOOST_AUTO_TEST_CASE(reduce_scatter_leaves_each_member_the_all_reduced_segment_it_owns) {
  for (const Backend backend : kBackends)
    for (const int members : {1, 2, 3, 4}) {
      BOOST_TEST_CONTEXT(backend_name(backend) << ", " << members << " members") {
        Group g(backend, members);
        const std::int64_t segment = 1037;   // several link chunks, not a multiple of anything
        const auto inputs = random_inputs(members, segment * members, 7u + static_cast<unsigned>(members),
                                          device_of(backend));
        const auto reduced = run(g, inputs, [](dp::Collective& c, Tensor& t) { c.allreduce_sum(t, dp::Compression::None); });
        const auto scattered =
            run(g, inputs, [](dp::Collective& c, Tensor& t) { c.reduce_scatter_sum(t, dp::Compression::None); });
        std::vector<std::vector<float>> in;
        for (const auto& t : inputs) in.push_back(host_values(t));
        for (int m = 0; m < members; ++m) {
          const auto got = host_values(scattered[static_cast<std::size_t>(m)]);
          const auto all = host_values(reduced[static_cast<std::size_t>(m)]);
          std::size_t differ = 0, wrong = 0;
          for (std::int64_t i = m * segment; i < (m + 1) * segment; ++i) {
            const auto k = static_cast<std::size_t>(i);
            if (std::memcmp(&got[k], &all[k], sizeof(float)) != 0) ++differ;
            double exact = 0.0, magnitude = 0.0;
            for (const auto& v : in) exact += v[k], magnitude += std::abs(v[k]);
            if (!(std::abs(got[k] - exact) <= 4e-7 * magnitude + 1e-30)) ++wrong;
          }
          BOOST_TEST(wrong == 0u, "member " << m);
          if (members <= 2) BOOST_TEST(differ == 0u, "member " << m << ": bits differ from the all-reduce");
        }
      }
    }
}

BOOST_AUTO_TEST_CASE(compressed_reduce_scatter_matches_the_compressed_all_reduce_for_two_members) {
  for (const Backend backend : kBackends)
    for (const auto compression : {dp::Compression::Fp16, dp::Compression::Bf16}) {
      BOOST_TEST_CONTEXT(backend_name(backend) << ", " << dp::compression_name(compression)) {
        Group g(backend, 2);
        const auto inputs = random_inputs(2, 2 * 600, 3u, device_of(backend));
        const auto reduced = run(g, inputs, [&](dp::Collective& c, Tensor& t) { c.allreduce_sum(t, compression); });
        const auto scattered = run(g, inputs, [&](dp::Collective& c, Tensor& t) { c.reduce_scatter_sum(t, compression); });
        for (int m = 0; m < 2; ++m) {
          const auto got = host_values(scattered[static_cast<std::size_t>(m)]);
          const auto all = host_values(reduced[static_cast<std::size_t>(m)]);
          BOOST_TEST(std::memcmp(got.data() + m * 600, all.data() + m * 600, 600 * sizeof(float)) == 0, "member " << m);
        }
      }
    }
}

BOOST_AUTO_TEST_CASE(all_gather_gives_every_member_every_owners_segment_bit_for_bit) {
  for (const Backend backend : kBackends)
    for (const int members : {1, 2, 3, 4})
      for (const DType dtype : {DType::F32, DType::BF16}) {
        BOOST_TEST_CONTEXT(backend_name(backend) << ", " << members << " members, " << kernels::dtype_name(dtype)) {
          Group g(backend, members);
          const std::int64_t segment = 517;
          auto inputs = random_inputs(members, segment * members, 11u, device_of(backend));
          for (auto& t : inputs) t = t.to(dtype);
          const auto gathered = run(g, inputs, [](dp::Collective& c, Tensor& t) { c.all_gather(t); });
          const std::size_t bytes = static_cast<std::size_t>(segment) * kernels::dtype_size(dtype);
          for (int m = 0; m < members; ++m) {
            const Tensor got = gathered[static_cast<std::size_t>(m)].to(kernels::Device::cpu(0));
            for (int owner = 0; owner < members; ++owner) {
              const Tensor want = inputs[static_cast<std::size_t>(owner)].to(kernels::Device::cpu(0));
              BOOST_TEST(std::memcmp(static_cast<const char*>(got.raw()) + owner * bytes,
                                     static_cast<const char*>(want.raw()) + owner * bytes, bytes) == 0,
                         "member " << m << ", segment of " << owner);
            }
          }
        }
      }
}

BOOST_AUTO_TEST_CASE(gloo_reduce_scatter_in_small_chunks_gives_the_same_bits_as_in_one) {
  // Gloo's reduce-scatter is a ring moving chunks of at most exchange_chunk_bytes: the chunking
  // changes how the bytes travel, never the order of the sums.
  for (const int members : {2, 3, 4})
    for (const auto compression : {dp::Compression::None, dp::Compression::Bf16, dp::Compression::Fp16}) {
      BOOST_TEST_CONTEXT(members << " members, " << dp::compression_name(compression)) {
        const std::int64_t segment = 1001;   // 64-byte chunks: 63 of 4-byte elements, the last short
        const auto inputs = random_inputs(members, segment * members, 5u, kernels::Device::cpu(0));
        Group whole(Backend::Gloo, members), chunked(Backend::Gloo, members, dp::GlooCollectiveOptions{64});
        const auto op = [&](dp::Collective& c, Tensor& t) { c.reduce_scatter_sum(t, compression); };
        const auto one = run(whole, inputs, op);
        const auto many = run(chunked, inputs, op);
        for (int m = 0; m < members; ++m) {
          const auto a = host_values(one[static_cast<std::size_t>(m)]);
          const auto b = host_values(many[static_cast<std::size_t>(m)]);
          BOOST_TEST(std::memcmp(a.data() + m * segment, b.data() + m * segment,
                                 static_cast<std::size_t>(segment) * sizeof(float)) == 0,
                     "member " << m);
        }
      }
    }
}

BOOST_AUTO_TEST_CASE(gloo_ring_all_reduce_of_any_length_sums_alike_on_every_member_as_its_reduce_scatter) {
  // The ring (forced from 0 bytes, in 64-byte chunks): lengths below the member count (empty
  // segments), not a multiple of it, and of several chunks. Every member ends with the same bits,
  // each value the exact sum within rounding; where the length splits evenly, member m's segment
  // is bit for bit its reduce-scatter's, for any member count.
  const dp::GlooCollectiveOptions ring{64, 0};
  for (const int members : {2, 3, 4})
    for (const std::int64_t n : {std::int64_t{1}, std::int64_t{3}, std::int64_t{61}, std::int64_t{1000}, std::int64_t{1201}})
      for (const auto compression : {dp::Compression::None, dp::Compression::Bf16}) {
        BOOST_TEST_CONTEXT(members << " members, " << n << " elements, " << dp::compression_name(compression)) {
          Group g(Backend::Gloo, members, ring);
          const auto inputs = random_inputs(members, n, 13u, kernels::Device::cpu(0));
          const auto reduced = run(g, inputs, [&](dp::Collective& c, Tensor& t) { c.allreduce_sum(t, compression); });
          const auto first = host_values(reduced[0]);
          std::vector<std::vector<float>> in;
          for (const auto& t : inputs) in.push_back(host_values(t));
          std::size_t wrong = 0;
          for (std::int64_t i = 0; i < n; ++i) {
            const auto k = static_cast<std::size_t>(i);
            double exact = 0.0, magnitude = 0.0;
            for (const auto& v : in) exact += v[k], magnitude += std::abs(v[k]);
            const double bound = compression == dp::Compression::None ? 4e-7 : 2e-2;
            if (!(std::abs(first[k] - exact) <= bound * magnitude + 1e-30)) ++wrong;
          }
          BOOST_TEST(wrong == 0u);
          for (int m = 1; m < members; ++m)
            BOOST_TEST(std::memcmp(host_values(reduced[static_cast<std::size_t>(m)]).data(), first.data(),
                                   static_cast<std::size_t>(n) * sizeof(float)) == 0,
                       "member " << m << " differs from member 0");
          if (n % members != 0) continue;
          const auto scattered = run(g, inputs, [&](dp::Collective& c, Tensor& t) { c.reduce_scatter_sum(t, compression); });
          const std::int64_t segment = n / members;
          for (int m = 0; m < members; ++m) {
            const auto got = host_values(scattered[static_cast<std::size_t>(m)]);
            BOOST_TEST(std::memcmp(got.data() + m * segment, first.data() + m * segment,
                                   static_cast<std::size_t>(segment) * sizeof(float)) == 0,
                       "member " << m << ": its segment differs from the all-reduce's");
          }
        }
      }
}

BOOST_AUTO_TEST_CASE(a_gloo_ring_whose_neighbour_never_comes_fails_within_the_groups_timeout) {
  // Member 1 never joins: member 0's ring reduce-scatter and ring all-reduce end with a timeout
  // naming the group, not a hang.
  rpc::InMemoryStore store;
  std::vector<std::unique_ptr<dp::GlooCollective>> group(2);
  dp::run_per_rank(2, [&](int r) {
    group[static_cast<std::size_t>(r)] =
        std::make_unique<dp::GlooCollective>(r, 2, store, "lonely/", "127.0.0.1", 400ms, dp::GlooCollectiveOptions{4096, 0});
  });
  auto data = Tensor::zeros({2 * 64 * 1024}, DType::F32, kernels::Device::cpu(0));   // 128 chunks a segment
  for (const bool all_reduce : {false, true}) {
    BOOST_TEST_CONTEXT((all_reduce ? "all-reduce" : "reduce-scatter")) {
      try {
        if (all_reduce) group[0]->allreduce_sum(data, dp::Compression::None);
        else group[0]->reduce_scatter_sum(data, dp::Compression::None);
        BOOST_FAIL("no timeout");
      } catch (const rpc::TimeoutError& e) {
        BOOST_TEST(std::string(e.what()).find("lonely/") != std::string::npos, e.what());
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(a_gloo_chunk_below_16_bytes_is_refused) {
  rpc::InMemoryStore store;
  BOOST_CHECK_THROW(dp::GlooCollective(0, 1, store, "tiny/", "127.0.0.1", 1000ms, dp::GlooCollectiveOptions{8}),
                    std::exception);
}

BOOST_AUTO_TEST_CASE(a_length_that_does_not_split_evenly_is_refused) {
  for (const Backend backend : kBackends) {
    BOOST_TEST_CONTEXT(backend_name(backend)) {
      Group three(backend, 3);
      auto inputs = random_inputs(3, 10, 1u, device_of(backend));
      BOOST_CHECK_THROW(run(three, inputs, [](dp::Collective& c, Tensor& t) { c.all_gather(t); }), std::exception);
      BOOST_CHECK_THROW(
          run(three, inputs, [](dp::Collective& c, Tensor& t) { c.reduce_scatter_sum(t, dp::Compression::None); }),
          std::exception);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
