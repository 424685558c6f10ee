// The dropout mask: the documented hash rule, repeatability, and the kept fraction.
#include <boost/test/unit_test.hpp>

#include "kernels/ops/dropout.h"
#include "tests/support/test_util.h"

namespace k = pw::kernels;
using k::Tensor;

namespace {

// The rule in kernels/ops/dropout.h, written out again independently of the library.
bool expected_keep(std::uint64_t seed, std::uint64_t i, double p) {
  std::uint64_t z = seed ^ (i * 0x9E3779B97F4A7C15ull);
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) / 9007199254740992.0 >= p;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ops_dropout)

BOOST_AUTO_TEST_CASE(mask_follows_the_documented_hash) {
  const double p = 0.4;
  const std::uint64_t seed = 0xDEADBEEF;
  const Tensor x = Tensor::full({50, 40}, 1.0);
  const k::DropoutResult r = k::dropout_forward(x, p, seed);
  const auto mask = r.mask.to_double_vector();
  const auto y = r.y.to_double_vector();
  std::int64_t kept = 0;
  for (std::size_t i = 0; i < mask.size(); ++i) {
    const bool keep = expected_keep(seed, i, p);
    BOOST_REQUIRE_EQUAL(mask[i], keep ? 1.0 : 0.0);
    BOOST_REQUIRE_CLOSE(y[i], keep ? 1.0 / 0.6 : 0.0, 1e-5);
    kept += keep ? 1 : 0;
  }
  BOOST_CHECK_CLOSE(static_cast<double>(kept) / 2000.0, 0.6, 5.0);   // within 5 % of 1 - p
}

BOOST_AUTO_TEST_CASE(same_seed_same_mask_other_seed_other_mask) {
  const Tensor x = pw::test::random_tensor({1000}, 3);
  const auto a = k::dropout_forward(x, 0.5, 7).mask.to_double_vector();
  const auto b = k::dropout_forward(x, 0.5, 7).mask.to_double_vector();
  const auto c = k::dropout_forward(x, 0.5, 8).mask.to_double_vector();
  BOOST_CHECK(a == b);
  BOOST_CHECK(a != c);
}

BOOST_AUTO_TEST_CASE(extreme_probabilities) {
  const Tensor x = pw::test::random_tensor({64}, 4);
  pw::test::check_close(k::dropout_forward(x, 0.0, 1).y, x, 0, 1e-12, "p = 0 keeps everything unchanged");
  pw::test::check_close(k::dropout_forward(x, 1.0, 1).y, Tensor::zeros({64}), 0, 1e-12, "p = 1 drops everything");
}

BOOST_AUTO_TEST_SUITE_END()
