#include <cmath>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "models/data/synthetic_clicks.h"

namespace pw::models::data {
namespace {

std::vector<float> row(const Dataset& set, std::int64_t index, std::int64_t& label) {
  std::vector<float> v(static_cast<std::size_t>(kernels::shape_numel(set.sample_shape())));
  set.fill(index, v.data(), label);
  return v;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(synthetic_clicks)

BOOST_AUTO_TEST_CASE(deterministic_per_seed_and_split) {
  const ClickFeatures f;
  const auto x = make_synthetic_clicks(f, 500, 7, Split::Train);
  const auto y = make_synthetic_clicks(f, 500, 7, Split::Train);
  const auto other_seed = make_synthetic_clicks(f, 500, 8, Split::Train);
  const auto test = make_synthetic_clicks(f, 500, 7, Split::Test);
  std::int64_t la = 0, lb = 0, lc = 0, ld = 0;
  BOOST_TEST(row(*x, 123, la) == row(*y, 123, lb), boost::test_tools::per_element());
  BOOST_TEST(la == lb);
  BOOST_TEST(row(*x, 123, la) != row(*other_seed, 123, lc));
  BOOST_TEST(row(*x, 123, la) != row(*test, 123, ld));
  BOOST_TEST(x->true_logit(42) == y->true_logit(42));
  BOOST_TEST(x->true_auc() == y->true_auc());
  BOOST_TEST(x->sample_shape() == kernels::Shape({f.width()}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(ids_are_integers_in_range_and_skewed) {
  ClickFeatures f;
  f.table_sizes = {50, 20000};
  f.bag_size = 3;
  const auto set = make_synthetic_clicks(f, 4000, 1, Split::Train);
  std::vector<std::int64_t> hits(50, 0);
  std::int64_t positives = 0;
  for (std::int64_t i = 0; i < set->size(); ++i) {
    std::int64_t label = 0;
    const auto v = row(*set, i, label);
    positives += label;
    for (int feature = 0; feature < 2; ++feature) {
      for (int k = 0; k < 3; ++k) {
        const float id = v[static_cast<std::size_t>(f.id_column(feature, k))];
        BOOST_REQUIRE(id >= 0 && id < static_cast<float>(f.table_sizes[feature]) && std::floor(id) == id);
        if (feature == 0) ++hits[static_cast<std::size_t>(id)];
      }
    }
  }
  BOOST_TEST(hits[0] > 5 * hits[40]);   // Zipf: the head is far hotter than the tail
  BOOST_TEST(positives > 400);
  BOOST_TEST(positives < 3600);
}

BOOST_AUTO_TEST_CASE(true_model_auc_is_well_above_chance) {
  const auto set = make_synthetic_clicks(ClickFeatures{}, 10000, 3, Split::Test);
  const double auc = set->true_auc();
  BOOST_TEST_MESSAGE("known achievable AUC " << auc);
  BOOST_TEST(auc > 0.7);
  BOOST_TEST(auc < 0.95);
}

BOOST_AUTO_TEST_CASE(open_dataset_knows_synthetic_clicks) {
  DatasetOptions o;
  o.synthetic_size = 100;
  o.clicks.table_sizes = {10, 10};
  // synthetic_size counts training samples; the test split has a sixth as many (60000 / 10000).
  BOOST_TEST(open_dataset("synthetic-clicks", Split::Train, o)->size() == 100);
  const auto set = open_dataset("synthetic-clicks", Split::Test, o);
  BOOST_TEST(set->size() == 16);
  BOOST_TEST(set->num_classes() == 2);
  BOOST_TEST(set->sample_shape()[0] == o.clicks.width());
  o.clicks.table_sizes = {0};
  BOOST_CHECK_THROW(open_dataset("synthetic-clicks", Split::Test, o), InputError);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace pw::models::data
