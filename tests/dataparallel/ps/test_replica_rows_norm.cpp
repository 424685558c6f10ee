// The squared norm of what the servers apply when a stage's replicas each push their rows
// (dataparallel/ps/replica_rows_norm.h): the norm of the replicas' rows summed by key, against a
// direct sum over a dense table; rows both replicas touched count once, with their sum.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "dataparallel/ps/replica_rows_norm.h"

using pw::dp::PendingRows;

namespace {

// Rows of `keys` (ascending) with values drawn from `rng`.
PendingRows rows_of(const std::vector<std::int64_t>& keys, int width, std::mt19937& rng) {
  std::uniform_real_distribution<float> value(-2.0f, 2.0f);
  PendingRows p{keys, {}};
  for (std::size_t i = 0; i < keys.size() * static_cast<std::size_t>(width); ++i) p.rows.push_back(value(rng));
  return p;
}

// The direct computation: a dense table of every key's summed row, then its squares.
double direct(const std::vector<std::vector<PendingRows>>& all, int width) {
  double total = 0.0;
  for (std::size_t l = 0; l < all.front().size(); ++l) {
    std::map<std::int64_t, std::vector<double>> table;
    for (const auto& replica : all) {
      const auto& p = replica[l];
      for (std::size_t k = 0; k < p.keys.size(); ++k) {
        auto& row = table[p.keys[k]];
        row.resize(static_cast<std::size_t>(width), 0.0);
        for (int j = 0; j < width; ++j) row[static_cast<std::size_t>(j)] += p.rows[k * static_cast<std::size_t>(width) + static_cast<std::size_t>(j)];
      }
    }
    for (const auto& [key, row] : table)
      for (double v : row) total += v * v;
  }
  return total;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(replica_rows_norm)

BOOST_AUTO_TEST_CASE(the_norm_is_that_of_the_rows_summed_over_replicas) {
  std::mt19937 rng(5);
  const int width = 4;
  // Two layers; replicas share keys 3 and 9 of layer 0 and key 100 of layer 1.
  std::vector<std::vector<PendingRows>> all = {
      {rows_of({1, 3, 9}, width, rng), rows_of({100}, width, rng)},
      {rows_of({3, 9, 12}, width, rng), rows_of({100, 200}, width, rng)},
      {rows_of({}, width, rng), rows_of({7}, width, rng)}};
  const double summed = pw::dp::sum_of_squares_over_replicas(all);
  BOOST_TEST(summed == direct(all, width), boost::test_tools::tolerance(1e-12));
  // Not the sum of the replicas' own norms: shared keys add up before squaring.
  double separate = 0.0;
  for (const auto& replica : all)
    for (const auto& p : replica)
      for (float v : p.rows) separate += static_cast<double>(v) * v;
  BOOST_TEST(std::abs(summed - separate) > 1e-3);
}

BOOST_AUTO_TEST_CASE(rows_that_cancel_count_nothing_and_one_replica_is_its_own_norm) {
  PendingRows a{{5}, {1.0f, -2.0f}}, b{{5}, {-1.0f, 2.0f}};
  BOOST_TEST(pw::dp::sum_of_squares_over_replicas({{a}, {b}}) == 0.0);
  BOOST_TEST(pw::dp::sum_of_squares_over_replicas({{a}}) == 5.0);
  BOOST_TEST(pw::dp::sum_of_squares_over_replicas({{PendingRows{}}, {PendingRows{}}}) == 0.0);
  BOOST_TEST(pw::dp::sum_of_squares_over_replicas({}) == 0.0);
}

BOOST_AUTO_TEST_CASE(replicas_that_disagree_on_layers_or_widths_are_an_internal_error) {
  PendingRows a{{5}, {1.0f, 2.0f}}, wide{{6}, {1.0f, 2.0f, 3.0f}};
  BOOST_CHECK_THROW(pw::dp::sum_of_squares_over_replicas({{a}, {a, a}}), std::exception);
  BOOST_CHECK_THROW(pw::dp::sum_of_squares_over_replicas({{a}, {wide}}), std::exception);
}

BOOST_AUTO_TEST_SUITE_END()
