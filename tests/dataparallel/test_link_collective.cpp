// Collectives over the job's links (LinkCollective): ring all-reduce and broadcast against a
// double-precision reference, 16-bit compression, reproducible bits, cancellation, timeouts, and
// which collective `auto` picks.
#include <chrono>
#include <cmath>
#include <random>
#include <thread>

#include <boost/test/unit_test.hpp>

#include "../rpc/rpc_test_world.h"
#include "dataparallel/cpu_collectives.h"
#include "dataparallel/link_collective.h"
#include "dataparallel/ring_layout.h"
#include "dataparallel/run_per_rank.h"
#include "kernels/half_float.h"
#include "rpc/in_process_transport.h"

using namespace pw;
using namespace std::chrono_literals;
using kernels::DType;
using kernels::Tensor;

namespace {

// A world of `world_size` ranks and a group of some of them, each member a LinkCollective.
struct Group {
  Group(int world_size, std::vector<int> members, const std::string& name, dp::LinkCollectiveOptions options = {},
        std::chrono::milliseconds timeout = 30000ms, bool thrift = false)
      : hub(world_size), ranks(std::move(members)) {
    if (thrift) {
      thrift_world = test::loopback_world(world_size, "link-collective-test-token");
      for (auto& t : thrift_world) transports.push_back(t.get());
    } else {
      for (int r = 0; r < world_size; ++r) {
        owned.push_back(hub.endpoint(r));
        transports.push_back(owned.back().get());
      }
    }
    for (int m : ranks)
      collectives.push_back(std::make_unique<dp::LinkCollective>(*transports[static_cast<std::size_t>(m)], ranks, name,
                                                                 timeout, options));
  }
  int size() const { return static_cast<int>(ranks.size()); }
  dp::LinkCollective& operator[](int i) { return *collectives[static_cast<std::size_t>(i)]; }

  rpc::InProcessHub hub;
  std::vector<std::unique_ptr<rpc::Transport>> owned;
  std::vector<std::unique_ptr<rpc::ThriftTransport>> thrift_world;
  std::vector<rpc::Transport*> transports;
  std::vector<int> ranks;
  std::vector<std::unique_ptr<dp::LinkCollective>> collectives;
};

// Members 1, 3, 5, ... of a world twice as large: group ranks and world ranks differ.
std::vector<int> odd_ranks(int members) {
  std::vector<int> out;
  for (int i = 0; i < members; ++i) out.push_back(2 * i + 1);
  return out;
}

std::vector<Tensor> random_inputs(int members, std::int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<Tensor> out;
  for (int m = 0; m < members; ++m) {
    std::vector<float> v(static_cast<std::size_t>(n));
    for (auto& x : v) x = u(rng);
    out.push_back(Tensor::from_vector(v, {n}));
  }
  return out;
}

Tensor copy(const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), t.dtype());
  if (t.nbytes() > 0) std::memcpy(c.raw(), t.raw(), t.nbytes());
  return c;
}

// The exact sum and the sum of magnitudes of element i over the inputs, in double.
struct Reference {
  std::vector<double> sum, magnitude;
};
Reference reference(const std::vector<Tensor>& inputs, const std::function<float(float)>& round = {}) {
  const auto n = static_cast<std::size_t>(inputs.at(0).numel());
  Reference ref{std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
  for (const auto& t : inputs) {
    const float* v = t.data<float>();
    for (std::size_t i = 0; i < n; ++i) {
      const double x = round ? round(v[i]) : v[i];
      ref.sum[i] += x;
      ref.magnitude[i] += std::abs(x);
    }
  }
  return ref;
}

// Runs one all-reduce on copies of `inputs`; returns every member's result.
std::vector<Tensor> allreduce(Group& g, const std::vector<Tensor>& inputs, dp::Compression compression) {
  std::vector<Tensor> data;
  for (const auto& t : inputs) data.push_back(copy(t));
  dp::run_per_rank(g.size(), [&](int m) { g[m].allreduce_sum(data[static_cast<std::size_t>(m)], compression); });
  return data;
}

// Each result within `relative` of the sum of magnitudes (plus `absolute`) of the exact sum, and
// every member's bits alike.
void check_sums(const std::vector<Tensor>& results, const Reference& ref, double relative, double absolute = 1e-30) {
  for (std::size_t m = 0; m < results.size(); ++m) {
    BOOST_TEST_CONTEXT("member " << m) {
      BOOST_TEST(test::same_bits(results[m], results[0]));
      const float* got = results[m].data<float>();
      std::size_t bad = 0;
      for (std::size_t i = 0; i < ref.sum.size(); ++i)
        if (!(std::abs(got[i] - ref.sum[i]) <= relative * ref.magnitude[i] + absolute)) ++bad;
      BOOST_TEST(bad == 0u);
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ring_layout)

BOOST_AUTO_TEST_CASE(segments_and_chunks_cover_the_buffer_once) {
  for (int members : {1, 2, 3, 4})
    for (std::int64_t elements : {0, 1, 7, 1000, 1000003})
      for (std::int64_t chunk : {1, 3, 256, 1 << 20}) {
        BOOST_TEST_CONTEXT(members << " members, " << elements << " elements, chunks of " << chunk) {
          if (elements / chunk > 100000) continue;
          const dp::RingLayout ring(elements, members, chunk);
          std::int64_t next = 0;
          for (int s = 0; s < members; ++s) {
            const auto seg = ring.segment(s);
            BOOST_TEST(seg.begin == next);
            std::int64_t inside = seg.begin;
            for (int c = 0; c < ring.chunks_per_segment(); ++c) {
              const auto piece = ring.chunk(s, c);
              BOOST_TEST(piece.begin == inside);
              BOOST_TEST(piece.count <= chunk);
              inside += piece.count;
            }
            BOOST_TEST(inside == seg.begin + seg.count);
            next += seg.count;
          }
          BOOST_TEST(next == elements);
          BOOST_TEST(ring.segment(-1).begin == ring.segment(members - 1).begin);
        }
      }
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(link_collective)

BOOST_AUTO_TEST_CASE(allreduce_matches_the_double_sum_for_any_group_and_size) {
  for (int members : {1, 2, 3, 4})
    for (std::int64_t n : {0, 1, 7, 1 << 20}) {
      BOOST_TEST_CONTEXT(members << " members, " << n << " elements") {
        // Small chunks cut even small buffers into several messages.
        Group g(2 * members, odd_ranks(members), "sum/", {n > 1000 ? 64 * 1024 : 8});
        const auto inputs = random_inputs(members, n, static_cast<unsigned>(members * 100 + n));
        const auto results = allreduce(g, inputs, dp::Compression::None);
        if (n > 0) check_sums(results, reference(inputs), members * 1.2e-7);
      }
    }
}

BOOST_AUTO_TEST_CASE(compressed_sums_stay_in_16_bits_within_their_rounding) {
  const std::int64_t n = 10007;
  for (auto compression : {dp::Compression::Fp16, dp::Compression::Bf16})
    for (int members : {2, 3, 4}) {
      BOOST_TEST_CONTEXT(dp::compression_name(compression) << ", " << members << " members") {
        const bool fp16 = compression == dp::Compression::Fp16;
        Group h(2 * members, odd_ranks(members), fp16 ? "f16/" : "bf16/", {512});
        const auto inputs = random_inputs(members, n, 7);
        const auto results = allreduce(h, inputs, compression);
        // Every value is a 16-bit number: the sums were taken in that format.
        const auto to16 = [&](float x) {
          return fp16 ? kernels::f16_to_float(kernels::float_to_f16(x))
                      : kernels::bf16_to_float(kernels::float_to_bf16(x));
        };
        const float* got = results[0].data<float>();
        std::size_t not16 = 0;
        for (std::int64_t i = 0; i < n; ++i)
          if (to16(got[i]) != got[i]) ++not16;
        BOOST_TEST(not16 == 0u);
        // Each of the members' roundings (packing, then one per sum) costs at most half a unit in
        // the last place of the magnitudes (fp16's subnormals: 2^-25 each, absolute).
        const double unit = fp16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -8);
        check_sums(results, reference(inputs), members * unit, members * std::ldexp(1.0, -24));
      }
    }
}

BOOST_AUTO_TEST_CASE(the_same_inputs_give_the_same_bits_every_run_and_over_thrift) {
  const std::int64_t n = (1 << 18) + 3;
  const auto inputs = random_inputs(3, n, 11);
  Group threads(3, {0, 1, 2}, "det/", {32 * 1024});
  const auto first = allreduce(threads, inputs, dp::Compression::None);
  for (int run = 0; run < 3; ++run) {
    const auto again = allreduce(threads, inputs, dp::Compression::None);
    for (int m = 0; m < 3; ++m) BOOST_TEST(test::same_bits(again[m], first[m]));
  }
  Group sockets(3, {0, 1, 2}, "det/", {32 * 1024}, 30000ms, /*thrift=*/true);
  const auto over_thrift = allreduce(sockets, inputs, dp::Compression::None);
  for (int m = 0; m < 3; ++m) BOOST_TEST(test::same_bits(over_thrift[m], first[m]));
  const auto half_threads = allreduce(threads, inputs, dp::Compression::Bf16);
  const auto half_thrift = allreduce(sockets, inputs, dp::Compression::Bf16);
  for (int m = 0; m < 3; ++m) BOOST_TEST(test::same_bits(half_thrift[m], half_threads[m]));
}

BOOST_AUTO_TEST_CASE(broadcast_copies_the_roots_bytes_to_every_member) {
  for (int members : {1, 2, 3, 4})
    for (std::int64_t n : {0, 1, 7, 1 << 20}) {
      BOOST_TEST_CONTEXT(members << " members, " << n << " elements") {
        Group g(2 * members, odd_ranks(members), "bcast/", {n > 1000 ? 64 * 1024 : 3});
        for (int root = 0; root < members; ++root) {
          std::vector<Tensor> data;
          for (int m = 0; m < members; ++m)
            data.push_back(test::byte_pattern({n}, DType::F32, static_cast<unsigned>(m + 1)));
          const Tensor expected = copy(data[static_cast<std::size_t>(root)]);
          dp::run_per_rank(members, [&](int m) { g[m].broadcast(data[static_cast<std::size_t>(m)], root); });
          for (int m = 0; m < members; ++m) BOOST_TEST(test::same_bits(data[static_cast<std::size_t>(m)], expected));
        }
      }
    }
  // Buffers of other types (batch-norm counters) travel as bytes.
  Group g(3, {0, 1, 2}, "bcast-i64/", {5});
  std::vector<Tensor> counters;
  for (int m = 0; m < 3; ++m) counters.push_back(test::byte_pattern({9}, DType::I64, static_cast<unsigned>(m)));
  const Tensor expected = copy(counters[2]);
  dp::run_per_rank(3, [&](int m) { g[m].broadcast(counters[static_cast<std::size_t>(m)], 2); });
  for (int m = 0; m < 3; ++m) BOOST_TEST(test::same_bits(counters[static_cast<std::size_t>(m)], expected));
}

BOOST_AUTO_TEST_CASE(two_groups_on_the_same_ranks_never_mix) {
  // The gradient group and the batch-norm group of a stage reduce at the same time, on other threads.
  rpc::InProcessHub hub(2);
  auto t0 = hub.endpoint(0), t1 = hub.endpoint(1);
  dp::LinkCollective grads0(*t0, {0, 1}, "dp/stage0/", 30000ms, {64});
  dp::LinkCollective grads1(*t1, {0, 1}, "dp/stage0/", 30000ms, {64});
  dp::LinkCollective norms0(*t0, {0, 1}, "sbn/stage0/", 30000ms, {64});
  dp::LinkCollective norms1(*t1, {0, 1}, "sbn/stage0/", 30000ms, {64});
  // The engine's two groups of a stage have distinct ids for any stage count it accepts.
  std::size_t same = 0;
  for (int s = 0; s < 4096; ++s) {
    const std::string stage = "stage" + std::to_string(s) + "/";
    if (dp::LinkCollective::group_id("dp/" + stage) == dp::LinkCollective::group_id("sbn/" + stage)) ++same;
  }
  BOOST_TEST(same == 0u);
  std::vector<Tensor> g = {Tensor::full({1000}, 1.0), Tensor::full({1000}, 2.0)};
  std::vector<Tensor> b = {Tensor::full({1000}, 10.0), Tensor::full({1000}, 20.0)};
  dp::run_per_rank(4, [&](int i) {
    auto& c = i == 0 ? grads0 : i == 1 ? grads1 : i == 2 ? norms0 : norms1;
    auto& t = i < 2 ? g[static_cast<std::size_t>(i)] : b[static_cast<std::size_t>(i - 2)];
    for (int k = 0; k < 3; ++k) c.allreduce_sum(t, dp::Compression::None);
  });
  for (int m = 0; m < 2; ++m) {
    BOOST_TEST(g[static_cast<std::size_t>(m)].to_float_vector() == std::vector<float>(1000, 3.0f * 2 * 2));
    BOOST_TEST(b[static_cast<std::size_t>(m)].to_float_vector() == std::vector<float>(1000, 30.0f * 2 * 2));
  }
}

BOOST_AUTO_TEST_CASE(cancel_ends_a_waiting_member_at_once_and_every_later_call) {
  Group g(2, {0, 1}, "cancel/", {}, 600000ms);
  Tensor data = Tensor::full({100}, 1.0);
  std::thread canceller([&] {
    std::this_thread::sleep_for(200ms);
    g[0].cancel();
  });
  const auto t0 = std::chrono::steady_clock::now();
  const std::string first = test::error_of([&] {
    try {
      g[0].allreduce_sum(data, dp::Compression::None);   // member 1 never joins
    } catch (const rpc::AbortedError&) {
      throw;
    } catch (const std::exception& e) {
      throw std::runtime_error(std::string("not an AbortedError: ") + e.what());
    }
  });
  canceller.join();
  // Well before the 10-minute timeout (a bound, not a timing: it only fails if cancel() did nothing).
  BOOST_TEST((std::chrono::steady_clock::now() - t0 < 120s));
  BOOST_TEST(first.find("link group 'cancel/' (member 0 of 2)") != std::string::npos, first);
  BOOST_TEST(first.find("cancelled") != std::string::npos, first);
  BOOST_CHECK_THROW(g[0].broadcast(data, 0), rpc::AbortedError);
  BOOST_CHECK_THROW(g[0].allreduce_sum(data, dp::Compression::Fp16), rpc::AbortedError);
}

BOOST_AUTO_TEST_CASE(a_missing_member_times_out_naming_the_peer_operation_and_chunk) {
  Group g(4, {1, 3}, "lonely/", {}, 300ms);
  Tensor data = Tensor::full({10}, 1.0);
  try {
    g[0].allreduce_sum(data, dp::Compression::None);
    BOOST_FAIL("expected a timeout");
  } catch (const rpc::TimeoutError& e) {
    const std::string what = e.what();
    BOOST_TEST(what.find("link group 'lonely/' (member 0 of 2), all-reduce 0 (reduce-scatter step 0, chunk 0), "
                         "with member 1 (rank 3): no message from member 1 within 300 ms") != std::string::npos,
               what);
  }
  Group other(4, {1, 3}, "lonely-broadcast/", {}, 300ms);
  try {
    other[1].broadcast(data, 0);
    BOOST_FAIL("expected a timeout");
  } catch (const rpc::TimeoutError& e) {
    BOOST_TEST(std::string(e.what()).find("broadcast 0 (chunk 0), with member 0 (rank 1)") != std::string::npos,
               e.what());
  }
}

BOOST_AUTO_TEST_CASE(members_that_reduce_different_sizes_are_told) {
  Group g(2, {0, 1}, "sizes/", {1 << 20}, 30000ms);
  std::vector<Tensor> data = {Tensor::full({10}, 1.0), Tensor::full({12}, 1.0)};
  const std::string what = test::error_of([&] {
    dp::run_per_rank(2, [&](int m) { g[m].allreduce_sum(data[static_cast<std::size_t>(m)], dp::Compression::None); });
  });
  BOOST_TEST(what.find("do the members run the same operations on the same tensors?") != std::string::npos, what);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(cpu_collectives)

BOOST_AUTO_TEST_CASE(auto_takes_the_links_once_a_member_is_not_on_loopback) {
  using dp::CpuCollectives;
  const dp::GroupSite threads{}, loopback{{"127.0.0.1", "localhost", "::1"}}, hosts{{"127.0.0.1", "10.1.2.3"}};
  BOOST_TEST(!dp::links_leave_host(threads));
  BOOST_TEST(!dp::links_leave_host(loopback));
  BOOST_TEST(dp::links_leave_host(hosts));
  BOOST_TEST((dp::resolve_cpu_collectives(CpuCollectives::Auto, threads) == CpuCollectives::Gloo));
  BOOST_TEST((dp::resolve_cpu_collectives(CpuCollectives::Auto, loopback) == CpuCollectives::Gloo));
  BOOST_TEST((dp::resolve_cpu_collectives(CpuCollectives::Auto, hosts) == CpuCollectives::Links));
  BOOST_TEST((dp::resolve_cpu_collectives(CpuCollectives::Gloo, hosts) == CpuCollectives::Gloo));
  BOOST_TEST((dp::resolve_cpu_collectives(CpuCollectives::Links, threads) == CpuCollectives::Links));
  BOOST_TEST(enum_name(CpuCollectives::Links) == "links");
  BOOST_TEST((parse_enum<CpuCollectives>("gloo") == CpuCollectives::Gloo));
  BOOST_CHECK_THROW(parse_enum<CpuCollectives>("mpi"), InputError);
}

BOOST_AUTO_TEST_SUITE_END()
