// Every op with a backward against central finite differences in double precision.
#include <boost/test/unit_test.hpp>

#include "kernels/ops/activation.h"
#include "kernels/ops/batch_norm.h"
#include "kernels/ops/conv2d.h"
#include "kernels/ops/dropout.h"
#include "kernels/ops/elementwise.h"
#include "kernels/ops/embedding.h"
#include "kernels/ops/linear.h"
#include "kernels/ops/loss.h"
#include "kernels/ops/pool.h"
#include "tests/kernels/gradcheck.h"

namespace k = pw::kernels;
using k::DType;
using k::Tensor;
using pw::test::check_gradient;
using pw::test::numeric_gradient;
using pw::test::random_f64;
using pw::test::weighted_sum;

BOOST_AUTO_TEST_SUITE(ops_gradcheck)

BOOST_AUTO_TEST_CASE(conv2d_data_filter_bias_with_stride_and_padding) {
  const k::Conv2dParams p{.stride_h = 2, .stride_w = 1, .pad_h = 1, .pad_w = 2};
  Tensor x = random_f64({2, 3, 5, 6}, 1);
  Tensor w = random_f64({4, 3, 3, 2}, 2);
  Tensor b = random_f64({4}, 3);
  const Tensor r = random_f64(k::conv2d_output_shape(x.shape(), w.shape(), p), 4);
  auto loss = [&] { return weighted_sum(k::conv2d_forward(x, w, b, p), r); };

  const Tensor grad_x = k::conv2d_backward_data(r, w, x.shape(), p);
  Tensor grad_w = Tensor::zeros(w.shape(), DType::F64);
  Tensor grad_b = Tensor::zeros(b.shape(), DType::F64);
  k::conv2d_backward_filter(x, r, grad_w, grad_b, p);

  check_gradient(grad_x, numeric_gradient(x, loss), "conv2d grad_x");
  check_gradient(grad_w, numeric_gradient(w, loss), "conv2d grad_w");
  check_gradient(grad_b, numeric_gradient(b, loss), "conv2d grad_bias");
}

BOOST_AUTO_TEST_CASE(conv2d_backward_filter_accumulates) {
  const k::Conv2dParams p{.stride_h = 1, .stride_w = 1, .pad_h = 1, .pad_w = 1};
  const Tensor x = random_f64({2, 2, 4, 4}, 5);
  const Tensor r = random_f64({2, 3, 4, 4}, 6);
  Tensor once_w = Tensor::zeros({3, 2, 3, 3}, DType::F64), once_b = Tensor::zeros({3}, DType::F64);
  k::conv2d_backward_filter(x, r, once_w, once_b, p);
  Tensor twice_w = Tensor::zeros({3, 2, 3, 3}, DType::F64), twice_b = Tensor::zeros({3}, DType::F64);
  k::conv2d_backward_filter(x, r, twice_w, twice_b, p);
  k::conv2d_backward_filter(x, r, twice_w, twice_b, p);
  k::scale_inplace(once_w, 2.0);
  k::scale_inplace(once_b, 2.0);
  pw::test::check_close(twice_w, once_w, 1e-12, 1e-12, "grad_w after two calls");
  pw::test::check_close(twice_b, once_b, 1e-12, 1e-12, "grad_bias after two calls");
}

void check_batch_norm_train(const k::Shape& shape) {
  const std::int64_t c = shape[1];
  Tensor x = random_f64(shape, 7, -2.0, 3.0);
  Tensor gamma = random_f64({c}, 8, 0.5, 1.5);
  Tensor beta = random_f64({c}, 9);
  const Tensor r = random_f64(shape, 10);
  const k::BatchNormParams p{.momentum = 0.1, .eps = 1e-5};
  auto forward = [&](Tensor& save_mean, Tensor& save_invstd) {
    Tensor running_mean = Tensor::zeros({c}, DType::F64), running_var = Tensor::full({c}, 1.0, DType::F64);
    return k::batch_norm_forward_train(x, gamma, beta, running_mean, running_var, save_mean, save_invstd, p);
  };
  auto loss = [&] {
    Tensor mean = Tensor::empty({c}, DType::F64), invstd = Tensor::empty({c}, DType::F64);
    return weighted_sum(forward(mean, invstd), r);
  };
  Tensor save_mean = Tensor::empty({c}, DType::F64), save_invstd = Tensor::empty({c}, DType::F64);
  forward(save_mean, save_invstd);
  const k::BatchNormGrads grads = k::batch_norm_backward(x, r, gamma, save_mean, save_invstd, p);
  const std::string what = "batch_norm " + k::shape_str(shape);
  check_gradient(grads.grad_x, numeric_gradient(x, loss), what + " grad_x");
  check_gradient(grads.grad_gamma, numeric_gradient(gamma, loss), what + " grad_gamma");
  check_gradient(grads.grad_beta, numeric_gradient(beta, loss), what + " grad_beta");
}

BOOST_AUTO_TEST_CASE(batch_norm_train_nchw) { check_batch_norm_train({3, 2, 3, 4}); }
BOOST_AUTO_TEST_CASE(batch_norm_train_nc) { check_batch_norm_train({6, 5}); }

BOOST_AUTO_TEST_CASE(batch_norm_running_stats_use_unbiased_variance) {
  const Tensor x = Tensor::from_vector(std::vector<double>{1, 2, 3, 6}, {4, 1});
  Tensor gamma = Tensor::full({1}, 1.0, DType::F64), beta = Tensor::zeros({1}, DType::F64);
  Tensor rm = Tensor::zeros({1}, DType::F64), rv = Tensor::full({1}, 1.0, DType::F64);
  Tensor mean = Tensor::empty({1}, DType::F64), invstd = Tensor::empty({1}, DType::F64);
  k::batch_norm_forward_train(x, gamma, beta, rm, rv, mean, invstd, {.momentum = 0.1, .eps = 1e-5});
  // mean 3, biased variance 3.5, unbiased 14/3.
  BOOST_CHECK_CLOSE(rm.item(), 0.3, 1e-10);
  BOOST_CHECK_CLOSE(rv.item(), 0.9 + 0.1 * 14.0 / 3.0, 1e-10);
  BOOST_CHECK_CLOSE(invstd.item(), 1.0 / std::sqrt(3.5 + 1e-5), 1e-10);
}

BOOST_AUTO_TEST_CASE(relu) {
  // Values kept away from the kink at 0, where the derivative jumps.
  std::vector<double> v = random_f64({2, 3, 4}, 11).to_double_vector();
  for (double& e : v) e = e < 0 ? e - 0.05 : e + 0.05;
  Tensor x = Tensor::from_vector(v, {2, 3, 4});
  const Tensor r = random_f64(x.shape(), 12);
  auto loss = [&] { return weighted_sum(k::relu_forward(x), r); };
  check_gradient(k::relu_backward(k::relu_forward(x), r), numeric_gradient(x, loss), "relu grad_x");
}

BOOST_AUTO_TEST_CASE(max_pool_with_padding) {
  const k::Pool2dParams p{.kernel_h = 3, .kernel_w = 2, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1};
  Tensor x = pw::test::distinct_f64({2, 2, 5, 6}, 13);
  const Tensor r = random_f64(k::pool2d_output_shape(x.shape(), p), 14);
  auto loss = [&] { return weighted_sum(k::max_pool2d_forward(x, p).y, r); };
  const k::MaxPoolResult fwd = k::max_pool2d_forward(x, p);
  check_gradient(k::max_pool2d_backward(r, fwd.workspace, x.shape(), p), numeric_gradient(x, loss), "max_pool grad_x");
}

BOOST_AUTO_TEST_CASE(avg_pool_with_padding) {
  const k::Pool2dParams p{.kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 1, .pad_h = 1, .pad_w = 1};
  Tensor x = random_f64({2, 3, 5, 4}, 15);
  const Tensor r = random_f64(k::pool2d_output_shape(x.shape(), p), 16);
  auto loss = [&] { return weighted_sum(k::avg_pool2d_forward(x, p), r); };
  check_gradient(k::avg_pool2d_backward(r, x.shape(), p), numeric_gradient(x, loss), "avg_pool grad_x");
}

BOOST_AUTO_TEST_CASE(adaptive_avg_pool_non_divisible) {
  Tensor x = random_f64({2, 3, 5, 7}, 17);
  const Tensor r = random_f64({2, 3, 3, 2}, 18);
  auto loss = [&] { return weighted_sum(k::adaptive_avg_pool2d_forward(x, 3, 2), r); };
  check_gradient(k::adaptive_avg_pool2d_backward(r, x.shape()), numeric_gradient(x, loss), "adaptive_avg_pool grad_x");
}

BOOST_AUTO_TEST_CASE(linear_data_weight_bias) {
  Tensor x = random_f64({4, 5}, 19);
  Tensor w = random_f64({3, 5}, 20);
  Tensor b = random_f64({3}, 21);
  const Tensor r = random_f64({4, 3}, 22);
  auto loss = [&] { return weighted_sum(k::linear_forward(x, w, b), r); };
  Tensor grad_w = Tensor::zeros(w.shape(), DType::F64), grad_b = Tensor::zeros(b.shape(), DType::F64);
  k::linear_backward_weight(x, r, grad_w, grad_b);
  check_gradient(k::linear_backward_data(r, w), numeric_gradient(x, loss), "linear grad_x");
  check_gradient(grad_w, numeric_gradient(w, loss), "linear grad_w");
  check_gradient(grad_b, numeric_gradient(b, loss), "linear grad_bias");
}

BOOST_AUTO_TEST_CASE(add_both_inputs) {
  Tensor a = random_f64({3, 4}, 23);
  Tensor b = random_f64({3, 4}, 24);
  const Tensor r = random_f64({3, 4}, 25);
  auto loss = [&] { return weighted_sum(k::add(a, b), r); };
  check_gradient(r, numeric_gradient(a, loss), "add grad_a");
  check_gradient(r, numeric_gradient(b, loss), "add grad_b");
}

BOOST_AUTO_TEST_CASE(dropout_fixed_mask) {
  const double p = 0.3;
  const std::uint64_t seed = 1234;
  Tensor x = random_f64({4, 6}, 26);
  const Tensor r = random_f64({4, 6}, 27);
  auto loss = [&] { return weighted_sum(k::dropout_forward(x, p, seed).y, r); };
  const k::DropoutResult fwd = k::dropout_forward(x, p, seed);
  check_gradient(k::dropout_backward(r, fwd.mask, p), numeric_gradient(x, loss), "dropout grad_x");
}

BOOST_AUTO_TEST_CASE(softmax_cross_entropy_mean_loss) {
  Tensor logits = random_f64({5, 4}, 28, -3.0, 3.0);
  const Tensor labels = Tensor::from_vector(std::vector<std::int64_t>{0, 3, 1, 1, 2}, {5});
  auto loss = [&] { return k::softmax_cross_entropy_forward(logits, labels).loss; };
  const k::CrossEntropyResult fwd = k::softmax_cross_entropy_forward(logits, labels);
  const Tensor grad = k::softmax_cross_entropy_backward(fwd.probs, labels, 1.0 / 5.0);
  check_gradient(grad, numeric_gradient(logits, loss), "cross_entropy grad_logits");
}

BOOST_AUTO_TEST_CASE(embedding_gather_backward_is_scatter_add) {
  Tensor table = random_f64({6, 3}, 29);
  const Tensor ids = Tensor::from_vector(std::vector<std::int64_t>{4, 0, 4, 2, 5, 4, 0}, {7});
  const Tensor r = random_f64({7, 3}, 30);
  auto loss = [&] { return weighted_sum(k::embedding_gather(table, ids), r); };
  Tensor grad_table = Tensor::zeros(table.shape(), DType::F64);
  k::embedding_scatter_add(grad_table, ids, r);
  check_gradient(grad_table, numeric_gradient(table, loss), "embedding grad_table");
}

BOOST_AUTO_TEST_CASE(matmul_transposes_match_explicit_products) {
  for (const DType dtype : {DType::F64, DType::F32}) {
    for (const k::Transpose ta : {k::Transpose::No, k::Transpose::Yes}) {
      for (const k::Transpose tb : {k::Transpose::No, k::Transpose::Yes}) {
        const std::int64_t m = 3, kk = 4, n = 5;
        const Tensor a = random_f64(ta == k::Transpose::No ? k::Shape{m, kk} : k::Shape{kk, m}, 31);
        const Tensor b = random_f64(tb == k::Transpose::No ? k::Shape{kk, n} : k::Shape{n, kk}, 32);
        std::vector<double> expected(static_cast<std::size_t>(m * n), 0.0);
        const auto va = a.to_double_vector(), vb = b.to_double_vector();
        for (std::int64_t i = 0; i < m; ++i)
          for (std::int64_t j = 0; j < n; ++j)
            for (std::int64_t q = 0; q < kk; ++q)
              expected[static_cast<std::size_t>(i * n + j)] +=
                  va[static_cast<std::size_t>(ta == k::Transpose::No ? i * kk + q : q * m + i)] *
                  vb[static_cast<std::size_t>(tb == k::Transpose::No ? q * n + j : j * kk + q)];
        const Tensor c = k::matmul(a.to(dtype), b.to(dtype), ta, tb);
        pw::test::check_close(c, Tensor::from_vector(expected, {m, n}), 1e-5, 1e-6,
                              "matmul " + k::dtype_name(dtype) + " ta=" + std::to_string(int(ta)) +
                                  " tb=" + std::to_string(int(tb)));
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
