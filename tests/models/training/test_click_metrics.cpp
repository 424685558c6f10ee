// Binary cross-entropy with logits (value, stability, gradient by finite differences) and AUC.
#include <cmath>

#include <boost/test/unit_test.hpp>

#include "models/loss.h"
#include "models/metrics.h"
#include "tests/support/test_util.h"

using namespace pw;
using namespace pw::models;
using kernels::DType;
using kernels::Tensor;

BOOST_AUTO_TEST_SUITE(binary_cross_entropy)

BOOST_AUTO_TEST_CASE(values_match_the_formula_and_stay_finite) {
  const Tensor z = Tensor::from_vector(std::vector<double>{0.0, 2.0, -3.0, 1000.0, -1000.0}, {5, 1});
  const Tensor y = Tensor::from_vector(std::vector<std::int64_t>{1, 0, 0, 0, 0}, {5});
  const auto r = binary_cross_entropy_with_logits(z, y, 1.0);
  const double expected = (std::log(2.0) + std::log1p(std::exp(2.0)) + std::log1p(std::exp(-3.0)) + 1000.0 + 0.0) / 5;
  BOOST_CHECK_CLOSE(r.loss, expected, 1e-10);
  BOOST_TEST(r.correct == 2);   // -3 and -1000 predict 0 correctly; 0 is not > 0
  const auto g = r.grad_logits.to_double_vector();
  BOOST_CHECK_CLOSE(g[0], -0.5, 1e-10);
  BOOST_CHECK_CLOSE(g[3], 1.0, 1e-10);
  BOOST_CHECK_SMALL(g[4], 1e-300);
  BOOST_TEST((r.grad_logits.dtype() == DType::F64));
}

BOOST_AUTO_TEST_CASE(gradient_matches_finite_differences_in_f64) {
  const Tensor z = test::random_tensor({9, 1}, 3, -4, 4, DType::F64);
  std::vector<std::int64_t> labels;
  for (int i = 0; i < 9; ++i) labels.push_back(i % 3 == 0 ? 1 : 0);
  const Tensor y = Tensor::from_vector(labels, {9});
  const auto analytic = binary_cross_entropy_with_logits(z, y, 1.0 / 9).grad_logits.to_double_vector();
  for (std::int64_t i = 0; i < 9; ++i) {
    const double keep = z.data<double>()[i], eps = 1e-6;
    z.data<double>()[i] = keep + eps;
    const double up = binary_cross_entropy_with_logits(z, y, 1.0).loss;
    z.data<double>()[i] = keep - eps;
    const double down = binary_cross_entropy_with_logits(z, y, 1.0).loss;
    z.data<double>()[i] = keep;
    BOOST_CHECK_SMALL(analytic[static_cast<std::size_t>(i)] - (up - down) / (2 * eps), 1e-9);
  }
}

BOOST_AUTO_TEST_CASE(bad_labels_are_input_errors) {
  const Tensor z = Tensor::zeros({2, 1});
  BOOST_CHECK_THROW(binary_cross_entropy_with_logits(z, Tensor::from_vector(std::vector<std::int64_t>{0, 2}, {2}), 1.0),
                    InputError);
  BOOST_CHECK_THROW(binary_cross_entropy_with_logits(Tensor::zeros({2, 3}), Tensor::zeros({2}, DType::I64), 1.0), Error);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(auc)

BOOST_AUTO_TEST_CASE(hand_made_cases) {
  BOOST_CHECK_EQUAL(roc_auc({0.1, 0.2, 0.8, 0.9}, {0, 0, 1, 1}), 1.0);
  BOOST_CHECK_EQUAL(roc_auc({0.9, 0.8, 0.2, 0.1}, {0, 0, 1, 1}), 0.0);
  BOOST_CHECK_EQUAL(roc_auc({0.5, 0.5, 0.5, 0.5, 0.5}, {0, 1, 0, 1, 1}), 0.5);
  // Positives 0.4 and 0.8 against negatives 0.4 and 0.1: pairs won 1 + 0.5 (tie) + 1 + 1 of 4.
  BOOST_CHECK_CLOSE(roc_auc({0.4, 0.8, 0.4, 0.1}, {1, 1, 0, 0}), 3.5 / 4, 1e-12);
}

BOOST_AUTO_TEST_CASE(matches_the_pairwise_definition) {
  std::mt19937_64 rng(5);
  std::vector<double> s;
  std::vector<std::int64_t> y;
  for (int i = 0; i < 300; ++i) {
    s.push_back(static_cast<double>(rng() % 20));   // many ties
    y.push_back(static_cast<std::int64_t>(rng() % 3 == 0));
  }
  double won = 0, pairs = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    for (std::size_t j = 0; j < s.size(); ++j) {
      if (y[i] != 1 || y[j] != 0) continue;
      pairs += 1;
      won += s[i] > s[j] ? 1.0 : s[i] == s[j] ? 0.5 : 0.0;
    }
  }
  BOOST_CHECK_CLOSE(roc_auc(s, y), won / pairs, 1e-10);
}

BOOST_AUTO_TEST_CASE(one_class_or_mismatch_is_an_input_error) {
  BOOST_CHECK_THROW(roc_auc({0.1, 0.2}, {1, 1}), InputError);
  BOOST_CHECK_THROW(roc_auc({0.1, 0.2}, {1}), InputError);
  BOOST_CHECK_THROW(roc_auc({0.1, 0.2}, {1, 3}), InputError);
}

BOOST_AUTO_TEST_SUITE_END()
