// EmbeddingBag and the DLRM interaction: brute-force references, finite differences in F64, the
// unique-rows factorisation against the full table, and the input errors.
#include <boost/test/unit_test.hpp>

#include "kernels/ops/embedding.h"
#include "models/layers/dot_interaction.h"
#include "models/layers/embedding_bag.h"
#include "tests/support/test_util.h"

using namespace pw;
using namespace pw::models;
using kernels::DType;
using kernels::Tensor;

namespace {

Tensor ids_tensor(const std::vector<std::int64_t>& v, std::int64_t batch, std::int64_t bag) {
  return Tensor::from_vector(v, {batch, bag});
}

// out[b] = sum_k table[ids[b][k]] (divided by bag for Mean), in double.
std::vector<double> brute_force(const std::vector<double>& table, std::int64_t dim, const std::vector<std::int64_t>& ids,
                                std::int64_t bag, BagMode mode) {
  const std::int64_t batch = static_cast<std::int64_t>(ids.size()) / bag;
  std::vector<double> out(static_cast<std::size_t>(batch * dim), 0.0);
  for (std::int64_t b = 0; b < batch; ++b) {
    for (std::int64_t k = 0; k < bag; ++k) {
      for (std::int64_t j = 0; j < dim; ++j) {
        out[b * dim + j] += table[ids[b * bag + k] * dim + j] / (mode == BagMode::Mean ? bag : 1);
      }
    }
  }
  return out;
}

double weighted_sum(const Tensor& y, const Tensor& w) {
  const auto a = y.to_double_vector(), b = w.to_double_vector();
  double s = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

template <typename Fn>
void expect_input_error(Fn fn, const std::string& needle) {
  try {
    fn();
    BOOST_FAIL("expected an InputError mentioning " << needle);
  } catch (const InputError& e) {
    const std::string msg = e.what();
    BOOST_CHECK_MESSAGE(msg.find(needle) != std::string::npos, msg);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(embedding_bag)

BOOST_AUTO_TEST_CASE(forward_and_backward_match_brute_force) {
  const std::vector<std::int64_t> ids = {3, 3, 0, 9, 1, 4, 9, 9, 2, 0, 7, 5};   // [4, 3] with repeats
  for (BagMode mode : {BagMode::Sum, BagMode::Mean}) {
    EmbeddingBag layer(10, 5, 3, mode);
    layer.initialize(11);
    const auto table = layer.parameters()[0]->value.to_double_vector();
    auto out = layer.forward(ids_tensor(ids, 4, 3), Mode::Train);
    test::check_close(out.y, Tensor::from_vector(brute_force(table, 5, ids, 3, mode), {4, 5}).to(DType::F32), 1e-6,
                      1e-6, "pooled rows");

    const Tensor g = test::random_tensor({4, 5}, 3);
    const Tensor gx = layer.backward(*out.ctx, g);
    BOOST_TEST((gx.dtype() == DType::I64));
    for (std::int64_t v : gx.to_int_vector()) BOOST_TEST(v == 0);   // ids carry no gradient
    // grad_table[r] = sum over (b, k) with ids[b][k] == r of g[b] (/ bag for Mean).
    const auto gv = g.to_double_vector();
    std::vector<double> expected(50, 0.0);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      for (std::size_t j = 0; j < 5; ++j) expected[ids[i] * 5 + j] += gv[(i / 3) * 5 + j] / (mode == BagMode::Mean ? 3 : 1);
    }
    test::check_close(layer.parameters()[0]->grad, Tensor::from_vector(expected, {10, 5}).to(DType::F32), 1e-6, 1e-6,
                      "table gradient");
  }
}

BOOST_AUTO_TEST_CASE(unique_rows_path_equals_full_table_path) {
  const Tensor table = test::random_tensor({50, 4}, 5, -1, 1, DType::F64);
  std::vector<std::int64_t> v;
  for (int i = 0; i < 6 * 4; ++i) v.push_back((i * 37 + i / 5) % 50 % 13);   // few distinct, repeated
  const Tensor ids = ids_tensor(v, 6, 4);
  const UniqueIds u = unique_bag_ids(ids);
  BOOST_TEST(u.ids.numel() < ids.numel());
  const auto uid = u.ids.to_int_vector();
  BOOST_TEST(std::is_sorted(uid.begin(), uid.end()));
  const auto idx = u.index.to_int_vector();
  for (std::size_t i = 0; i < v.size(); ++i) BOOST_TEST(uid[idx[i]] == v[i]);

  for (BagMode mode : {BagMode::Sum, BagMode::Mean}) {
    const Tensor rows = kernels::embedding_gather(table, u.ids);
    const Tensor via_unique = bag_pool_forward(rows, u.index, mode);
    const Tensor via_table = bag_pool_forward(table, ids, mode);   // the ids index the whole table
    test::check_close(via_unique, via_table, 1e-15, 1e-15, "forward");

    const Tensor g = test::random_tensor({6, 4}, 9, -1, 1, DType::F64);
    const auto grad_unique = bag_pool_backward(g, u.index, u.ids.numel(), mode).to_double_vector();
    const auto grad_table = bag_pool_backward(g, ids, 50, mode).to_double_vector();
    std::vector<double> scattered(grad_table.size(), 0.0);
    for (std::size_t r = 0; r < uid.size(); ++r) {
      for (std::size_t j = 0; j < 4; ++j) scattered[uid[r] * 4 + j] = grad_unique[r * 4 + j];
    }
    test::check_close(Tensor::from_vector(scattered, {50, 4}), Tensor::from_vector(grad_table, {50, 4}), 1e-15, 1e-15,
                      "backward");
  }
}

BOOST_AUTO_TEST_CASE(pool_gradient_matches_finite_differences_in_f64) {
  const Tensor rows = test::random_tensor({7, 3}, 21, -1, 1, DType::F64);
  const Tensor index = ids_tensor({0, 6, 6, 2, 1, 0, 5, 5, 5, 3, 4, 0}, 4, 3);
  const Tensor w = test::random_tensor({4, 3}, 22, -1, 1, DType::F64);
  for (BagMode mode : {BagMode::Sum, BagMode::Mean}) {
    const auto analytic = bag_pool_backward(w, index, 7, mode).to_double_vector();
    for (std::int64_t i = 0; i < rows.numel(); ++i) {
      const double keep = rows.data<double>()[i];
      const double eps = 1e-6;
      rows.data<double>()[i] = keep + eps;
      const double up = weighted_sum(bag_pool_forward(rows, index, mode), w);
      rows.data<double>()[i] = keep - eps;
      const double down = weighted_sum(bag_pool_forward(rows, index, mode), w);
      rows.data<double>()[i] = keep;
      BOOST_CHECK_SMALL(analytic[static_cast<std::size_t>(i)] - (up - down) / (2 * eps), 1e-8);
    }
  }
}

BOOST_AUTO_TEST_CASE(bad_ids_are_one_line_input_errors) {
  EmbeddingBag layer(10, 4, 2, BagMode::Sum);
  expect_input_error([&] { layer.forward(ids_tensor({1, 2, 10, 3}, 2, 2), Mode::Train); },
                     "id 10 at [1, 0] is outside the table of 10 rows");
  expect_input_error([&] { layer.forward(ids_tensor({1, -1}, 1, 2), Mode::Train); }, "id -1");
  expect_input_error([&] { layer.forward(ids_tensor({1, 2, 3}, 1, 3), Mode::Train); }, "expects ids [batch, 2]");
  expect_input_error([&] { layer.forward(Tensor::from_vector(std::vector<float>{1, 2, 3, 1.5f}, {2, 2}), Mode::Train); },
                     "input 1.5 at [1, 1] is not a whole number");
  expect_input_error([] { EmbeddingBag(0, 4, 2, BagMode::Sum); }, "positive rows");
}

// A model's input (or a stage's activation) is F32: whole numbers in it are ids, and the input
// gradient (zeros: ids carry none) comes back in the input's type.
BOOST_AUTO_TEST_CASE(float_ids_look_up_the_same_rows_as_integer_ids) {
  EmbeddingBag layer(10, 4, 2, BagMode::Mean);
  layer.initialize(3);
  const auto as_ints = layer.forward(ids_tensor({1, 2, 9, 3}, 2, 2), Mode::Train);
  auto as_floats = layer.forward(Tensor::from_vector(std::vector<float>{1, 2, 9, 3}, {2, 2}), Mode::Train);
  BOOST_TEST(as_floats.y.to_double_vector() == as_ints.y.to_double_vector());
  const Tensor grad_in = layer.backward(*as_floats.ctx, Tensor::full({2, 4}, 1.0));
  BOOST_TEST((grad_in.dtype() == kernels::DType::F32));
  BOOST_TEST(grad_in.to_double_vector() == std::vector<double>(4, 0.0));
}

BOOST_AUTO_TEST_CASE(dot_interaction_matches_reference_and_finite_differences) {
  DotInteraction layer(3, 2);
  // One sample, vectors a=(1,2) b=(3,4) c=(5,6): output a, then b.a, c.a, c.b.
  auto out = layer.forward(Tensor::from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {1, 6}), Mode::Train);
  test::check_close(out.y, Tensor::from_vector(std::vector<double>{1, 2, 11, 17, 39}, {1, 5}), 0, 0, "interaction");

  const Tensor x = test::random_tensor({3, 6}, 4, -1, 1, DType::F64);
  const Tensor w = test::random_tensor({3, 5}, 5, -1, 1, DType::F64);
  auto fwd = layer.forward(x, Mode::Train);
  const auto analytic = layer.backward(*fwd.ctx, w).to_double_vector();
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const double keep = x.data<double>()[i];
    const double eps = 1e-6;
    x.data<double>()[i] = keep + eps;
    const double up = weighted_sum(layer.forward(x, Mode::Eval).y, w);
    x.data<double>()[i] = keep - eps;
    const double down = weighted_sum(layer.forward(x, Mode::Eval).y, w);
    x.data<double>()[i] = keep;
    BOOST_CHECK_SMALL(analytic[static_cast<std::size_t>(i)] - (up - down) / (2 * eps), 1e-8);
  }
}

BOOST_AUTO_TEST_SUITE_END()
