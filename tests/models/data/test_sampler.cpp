#include <algorithm>
#include <numeric>
#include <set>

#include <boost/test/unit_test.hpp>

#include "core/error.h"
#include "models/data/sampler.h"

namespace pw::models::data {
namespace {

std::vector<std::int64_t> iota(std::int64_t n) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), std::int64_t{0});
  return v;
}

BOOST_AUTO_TEST_SUITE(sampler)

BOOST_AUTO_TEST_CASE(unshuffled_order_is_the_identity) {
  BOOST_TEST(epoch_order(17, Shuffle::No, 5, 3) == iota(17), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(shuffled_order_is_a_seeded_permutation_per_epoch) {
  const auto a = epoch_order(1000, Shuffle::Yes, 9, 0);
  BOOST_TEST(a == epoch_order(1000, Shuffle::Yes, 9, 0), boost::test_tools::per_element());
  BOOST_TEST(a != epoch_order(1000, Shuffle::Yes, 9, 1));
  BOOST_TEST(a != epoch_order(1000, Shuffle::Yes, 10, 0));
  BOOST_TEST(a != iota(1000));
  auto sorted = a;
  std::sort(sorted.begin(), sorted.end());
  BOOST_TEST(sorted == iota(1000), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(shard_slices_are_disjoint_covering_and_balanced) {
  for (std::int64_t size : {0, 1, 7, 100, 103}) {
    for (int count : {1, 2, 3, 4, 8}) {
      std::multiset<std::int64_t> all;
      for (int index = 0; index < count; ++index) {
        const auto part = shard_epoch_indices(size, Shuffle::Yes, 4, 2, {index, count});
        BOOST_TEST((static_cast<std::int64_t>(part.size()) == size / count ||
                    static_cast<std::int64_t>(part.size()) == size / count + 1));
        all.insert(part.begin(), part.end());
      }
      BOOST_TEST(std::vector<std::int64_t>(all.begin(), all.end()) == iota(size), boost::test_tools::per_element());
    }
  }
}

BOOST_AUTO_TEST_CASE(invalid_shards_are_input_errors) {
  BOOST_CHECK_THROW(check_shard({0, 0}), InputError);
  BOOST_CHECK_THROW(check_shard({2, 2}), InputError);
  BOOST_CHECK_THROW(check_shard({-1, 2}), InputError);
  BOOST_CHECK_NO_THROW(check_shard({1, 2}));
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace
}  // namespace pw::models::data
