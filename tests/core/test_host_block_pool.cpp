// The host block pool: blocks come zeroed and resident, a block given back is handed out again
// for the same size (zeroed again), other sizes get their own, and the cache stays under its
// limit, with the pool's counters saying so.
#include <cstdint>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "core/host_block_pool.h"
#include "core/host_pages.h"

using pw::HostBlockPool;

namespace {

bool all_zero(const void* block, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(block);
  for (std::size_t i = 0; i < bytes; ++i)
    if (p[i] != 0) return false;
  return true;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(host_block_pool)

BOOST_AUTO_TEST_CASE(a_block_given_back_is_reused_for_its_size_and_comes_zeroed) {
  HostBlockPool pool(std::size_t{64} << 20);
  const std::size_t big = pw::kHugePageBytes, small = 16 << 10;
  void* a = pool.take(big);
  BOOST_TEST(reinterpret_cast<std::uintptr_t>(a) % pw::kHugePageBytes == 0u);
  BOOST_TEST(all_zero(a, big));
  std::memset(a, 0xAB, big);
  pool.give_back(a, big);
  BOOST_TEST(pool.stats().cached == static_cast<std::int64_t>(big));
  BOOST_TEST(pool.stats().in_use == 0);

  void* s = pool.take(small);   // another size: a new block
  BOOST_TEST(s != a);
  void* again = pool.take(big);
  BOOST_TEST(again == a);
  BOOST_TEST(all_zero(again, big));
  const auto st = pool.stats();
  BOOST_TEST(st.reused == 1);
  BOOST_TEST(st.mapped == 2);
  BOOST_TEST(st.cached == 0);
  BOOST_TEST(st.in_use == static_cast<std::int64_t>(big + small));
  BOOST_TEST(st.peak_in_use == static_cast<std::int64_t>(big + small));
  pool.give_back(again, big);
  pool.give_back(s, small);
  pool.release_cached();
  BOOST_TEST(pool.stats().cached == 0);
}

BOOST_AUTO_TEST_CASE(blocks_beyond_the_cache_limit_go_back_to_the_kernel) {
  const std::size_t bytes = std::size_t{1} << 20;
  HostBlockPool pool(2 * bytes);
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(pool.take(bytes));
  for (void* b : blocks) pool.give_back(b, bytes);
  BOOST_TEST(pool.stats().cached == static_cast<std::int64_t>(2 * bytes));
  BOOST_TEST(pool.stats().in_use == 0);
  BOOST_TEST(pool.stats().peak_in_use == static_cast<std::int64_t>(4 * bytes));
}

BOOST_AUTO_TEST_CASE(threads_taking_and_giving_back_never_share_a_block) {
  HostBlockPool pool(std::size_t{8} << 20);
  const std::size_t bytes = 64 << 10;
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        auto* p = static_cast<unsigned char*>(pool.take(bytes));
        if (!all_zero(p, bytes)) ++failures[t];
        std::memset(p, t + 1, bytes);
        if (p[bytes - 1] != t + 1 || p[0] != t + 1) ++failures[t];
        pool.give_back(p, bytes);
      }
    });
  for (auto& th : threads) th.join();
  for (int f : failures) BOOST_TEST(f == 0);
  BOOST_TEST(pool.stats().in_use == 0);
}

BOOST_AUTO_TEST_SUITE_END()
