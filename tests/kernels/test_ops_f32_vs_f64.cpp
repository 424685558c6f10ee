// The F32 path (oneDNN, oneTBB) against the F64 reference loops on the same inputs.
#include <boost/test/unit_test.hpp>

#include "kernels/ops/activation.h"
#include "kernels/ops/batch_norm.h"
#include "kernels/ops/conv2d.h"
#include "kernels/ops/dropout.h"
#include "kernels/ops/elementwise.h"
#include "kernels/ops/embedding.h"
#include "kernels/ops/linear.h"
#include "kernels/ops/loss.h"
#include "kernels/ops/optimizer.h"
#include "kernels/ops/pool.h"
#include "tests/kernels/gradcheck.h"

namespace k = pw::kernels;
using k::DType;
using k::Tensor;

namespace {

using Pair = pw::test::PrecisionPair;
using pw::test::random_pair;

Pair widen(const Tensor& f32) { return {f32, f32.to(DType::F64)}; }

Pair zeros_pair(const k::Shape& shape) { return {Tensor::zeros(shape, DType::F32), Tensor::zeros(shape, DType::F64)}; }

void check(const Tensor& f32, const Tensor& f64, const std::string& what) {
  BOOST_REQUIRE(f32.dtype() == DType::F32);
  BOOST_REQUIRE(f64.dtype() == DType::F64);
  pw::test::check_close(f32, f64, 1e-4, 1e-5, what);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ops_f32_vs_f64)

BOOST_AUTO_TEST_CASE(conv2d_forward_and_backward) {
  for (const k::Conv2dParams p : {k::Conv2dParams{}, k::Conv2dParams{.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1},
                                  k::Conv2dParams{.stride_h = 1, .stride_w = 3, .pad_h = 2, .pad_w = 0}}) {
    const Pair x = random_pair({3, 4, 9, 8}, 1), w = random_pair({5, 4, 3, 3}, 2), b = random_pair({5}, 3);
    const k::Shape y_shape = k::conv2d_output_shape(x.f32.shape(), w.f32.shape(), p);
    const Pair r = random_pair(y_shape, 4);
    check(k::conv2d_forward(x.f32, w.f32, b.f32, p), k::conv2d_forward(x.f64, w.f64, b.f64, p), "conv2d y");
    check(k::conv2d_forward(x.f32, w.f32, Tensor(), p), k::conv2d_forward(x.f64, w.f64, Tensor(), p),
          "conv2d y without bias");
    check(k::conv2d_backward_data(r.f32, w.f32, x.f32.shape(), p),
          k::conv2d_backward_data(r.f64, w.f64, x.f64.shape(), p), "conv2d grad_x");
    // Start from non-zero gradients: backward_filter accumulates.
    Pair gw = random_pair(w.f32.shape(), 5), gb = random_pair({5}, 6);
    k::conv2d_backward_filter(x.f32, r.f32, gw.f32, gb.f32, p);
    k::conv2d_backward_filter(x.f64, r.f64, gw.f64, gb.f64, p);
    check(gw.f32, gw.f64, "conv2d grad_w");
    check(gb.f32, gb.f64, "conv2d grad_bias");
  }
}

BOOST_AUTO_TEST_CASE(batch_norm_train_eval_backward) {
  for (const k::Shape& shape : {k::Shape{4, 3, 5, 6}, k::Shape{16, 7}}) {
    const std::int64_t c = shape[1];
    const Pair x = random_pair(shape, 7, -1.0, 3.0), gamma = random_pair({c}, 8, 0.5, 1.5), beta = random_pair({c}, 9);
    const Pair r = random_pair(shape, 10);
    Pair rm = random_pair({c}, 11), rv = random_pair({c}, 12, 0.5, 2.0);
    Pair mean = zeros_pair({c}), invstd = zeros_pair({c});
    const k::BatchNormParams p{.momentum = 0.2, .eps = 1e-3};
    const std::string what = "batch_norm " + k::shape_str(shape);
    check(k::batch_norm_forward_train(x.f32, gamma.f32, beta.f32, rm.f32, rv.f32, mean.f32, invstd.f32, p),
          k::batch_norm_forward_train(x.f64, gamma.f64, beta.f64, rm.f64, rv.f64, mean.f64, invstd.f64, p),
          what + " train y");
    check(rm.f32, rm.f64, what + " running_mean");
    check(rv.f32, rv.f64, what + " running_var");
    check(mean.f32, mean.f64, what + " save_mean");
    check(invstd.f32, invstd.f64, what + " save_invstd");
    check(k::batch_norm_forward_eval(x.f32, gamma.f32, beta.f32, rm.f32, rv.f32, p),
          k::batch_norm_forward_eval(x.f64, gamma.f64, beta.f64, rm.f64, rv.f64, p), what + " eval y");
    const auto g32 = k::batch_norm_backward(x.f32, r.f32, gamma.f32, mean.f32, invstd.f32, p);
    const auto g64 = k::batch_norm_backward(x.f64, r.f64, gamma.f64, mean.f64, invstd.f64, p);
    check(g32.grad_x, g64.grad_x, what + " grad_x");
    check(g32.grad_gamma, g64.grad_gamma, what + " grad_gamma");
    check(g32.grad_beta, g64.grad_beta, what + " grad_beta");
  }
}

BOOST_AUTO_TEST_CASE(relu_forward_and_backward) {
  const Pair x = random_pair({3, 4, 5}, 13), r = random_pair({3, 4, 5}, 14);
  const Tensor y32 = k::relu_forward(x.f32), y64 = k::relu_forward(x.f64);
  check(y32, y64, "relu y");
  check(k::relu_backward(y32, r.f32), k::relu_backward(y64, r.f64), "relu grad_x");
}

BOOST_AUTO_TEST_CASE(max_and_avg_pool) {
  for (const k::Pool2dParams p :
       {k::Pool2dParams{}, k::Pool2dParams{.kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1},
        k::Pool2dParams{.kernel_h = 3, .kernel_w = 2, .stride_h = 1, .stride_w = 2, .pad_h = 1, .pad_w = 0}}) {
    const Pair x = widen(pw::test::distinct_f64({2, 3, 7, 6}, 15, 0.03125).to(DType::F32));
    const Pair r = random_pair(k::pool2d_output_shape(x.f32.shape(), p), 16);
    const k::MaxPoolResult m32 = k::max_pool2d_forward(x.f32, p), m64 = k::max_pool2d_forward(x.f64, p);
    check(m32.y, m64.y, "max_pool y");
    check(k::max_pool2d_backward(r.f32, m32.workspace, x.f32.shape(), p),
          k::max_pool2d_backward(r.f64, m64.workspace, x.f64.shape(), p), "max_pool grad_x");
    check(k::avg_pool2d_forward(x.f32, p), k::avg_pool2d_forward(x.f64, p), "avg_pool y");
    check(k::avg_pool2d_backward(r.f32, x.f32.shape(), p), k::avg_pool2d_backward(r.f64, x.f64.shape(), p),
          "avg_pool grad_x");
  }
}

BOOST_AUTO_TEST_CASE(adaptive_avg_pool) {
  const Pair x = random_pair({2, 3, 7, 5}, 17), r = random_pair({2, 3, 3, 4}, 18);
  check(k::adaptive_avg_pool2d_forward(x.f32, 3, 4), k::adaptive_avg_pool2d_forward(x.f64, 3, 4), "adaptive y");
  check(k::adaptive_avg_pool2d_backward(r.f32, x.f32.shape()), k::adaptive_avg_pool2d_backward(r.f64, x.f64.shape()),
        "adaptive grad_x");
}

BOOST_AUTO_TEST_CASE(linear_and_matmul) {
  const Pair x = random_pair({6, 10}, 19), w = random_pair({4, 10}, 20), b = random_pair({4}, 21);
  const Pair r = random_pair({6, 4}, 22);
  check(k::linear_forward(x.f32, w.f32, b.f32), k::linear_forward(x.f64, w.f64, b.f64), "linear y");
  check(k::linear_forward(x.f32, w.f32, Tensor()), k::linear_forward(x.f64, w.f64, Tensor()), "linear y without bias");
  check(k::linear_backward_data(r.f32, w.f32), k::linear_backward_data(r.f64, w.f64), "linear grad_x");
  Pair gw = random_pair(w.f32.shape(), 23), gb = random_pair({4}, 24);
  k::linear_backward_weight(x.f32, r.f32, gw.f32, gb.f32);
  k::linear_backward_weight(x.f64, r.f64, gw.f64, gb.f64);
  check(gw.f32, gw.f64, "linear grad_w (accumulated)");
  check(gb.f32, gb.f64, "linear grad_bias (accumulated)");
  check(k::matmul(x.f32, w.f32, k::Transpose::No, k::Transpose::Yes),
        k::matmul(x.f64, w.f64, k::Transpose::No, k::Transpose::Yes), "matmul x w^T");
  check(k::matmul(x.f32, x.f32, k::Transpose::Yes, k::Transpose::No),
        k::matmul(x.f64, x.f64, k::Transpose::Yes, k::Transpose::No), "matmul x^T x");
}

BOOST_AUTO_TEST_CASE(elementwise_and_reductions) {
  const Pair a = random_pair({100, 37}, 25), b = random_pair({100, 37}, 26);
  check(k::add(a.f32, b.f32), k::add(a.f64, b.f64), "add");
  Pair d = widen(a.f32.clone());
  k::add_inplace(d.f32, b.f32, -0.5);
  k::add_inplace(d.f64, b.f64, -0.5);
  check(d.f32, d.f64, "add_inplace");
  k::scale_inplace(d.f32, 3.0);
  k::scale_inplace(d.f64, 3.0);
  check(d.f32, d.f64, "scale_inplace");
  BOOST_CHECK_CLOSE(k::sum(a.f32), k::sum(a.f64), 1e-8);
  BOOST_CHECK_CLOSE(k::sum_of_squares(a.f32), k::sum_of_squares(a.f64), 1e-8);
}

BOOST_AUTO_TEST_CASE(reductions_are_repeatable) {
  const Tensor big = pw::test::random_tensor({1 << 20}, 27);
  const double first = k::sum(big);
  for (int i = 0; i < 5; ++i) BOOST_REQUIRE_EQUAL(k::sum(big), first);
  const double squares = k::sum_of_squares(big);
  for (int i = 0; i < 5; ++i) BOOST_REQUIRE_EQUAL(k::sum_of_squares(big), squares);
}

BOOST_AUTO_TEST_CASE(dropout_same_mask_both_precisions) {
  const Pair x = random_pair({33, 17}, 28), r = random_pair({33, 17}, 29);
  const k::DropoutResult d32 = k::dropout_forward(x.f32, 0.25, 99), d64 = k::dropout_forward(x.f64, 0.25, 99);
  BOOST_CHECK(d32.mask.to_double_vector() == d64.mask.to_double_vector());
  check(d32.y, d64.y, "dropout y");
  check(k::dropout_backward(r.f32, d32.mask, 0.25), k::dropout_backward(r.f64, d64.mask, 0.25), "dropout grad_x");
}

BOOST_AUTO_TEST_CASE(cross_entropy) {
  const Pair logits = random_pair({9, 6}, 30, -4.0, 4.0);
  const Tensor labels = Tensor::from_vector(std::vector<std::int64_t>{0, 5, 2, 2, 1, 3, 4, 0, 5}, {9});
  const auto l32 = k::softmax_cross_entropy_forward(logits.f32, labels);
  const auto l64 = k::softmax_cross_entropy_forward(logits.f64, labels);
  BOOST_CHECK_CLOSE(l32.loss, l64.loss, 1e-4);
  BOOST_CHECK_EQUAL(l32.correct, l64.correct);
  check(l32.probs, l64.probs, "softmax probs");
  check(k::softmax_cross_entropy_backward(l32.probs, labels, 1.0 / 9), k::softmax_cross_entropy_backward(l64.probs, labels, 1.0 / 9),
        "cross_entropy grad_logits");
}

BOOST_AUTO_TEST_CASE(embedding) {
  const Pair table = random_pair({10, 4}, 31), rows = random_pair({8, 4}, 32);
  const Tensor ids = Tensor::from_vector(std::vector<std::int64_t>{3, 3, 9, 0, 3, 7, 9, 1}, {8});
  check(k::embedding_gather(table.f32, ids), k::embedding_gather(table.f64, ids), "gather");
  Pair grad = random_pair({10, 4}, 33);
  k::embedding_scatter_add(grad.f32, ids, rows.f32);
  k::embedding_scatter_add(grad.f64, ids, rows.f64);
  check(grad.f32, grad.f64, "scatter_add");
}

BOOST_AUTO_TEST_CASE(optimizers) {
  const Pair grad = random_pair({50}, 34);
  Pair sgd = random_pair({50}, 35), buf = zeros_pair({50});
  Pair adam = random_pair({50}, 36), m = zeros_pair({50}), v = zeros_pair({50});
  Pair ada = random_pair({50}, 37), acc = zeros_pair({50});
  for (int step = 1; step <= 3; ++step) {
    k::sgd_update(sgd.f32, grad.f32, buf.f32, {.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-2}, step);
    k::sgd_update(sgd.f64, grad.f64, buf.f64, {.lr = 0.1, .momentum = 0.9, .weight_decay = 1e-2}, step);
    k::adam_update(adam.f32, grad.f32, m.f32, v.f32, {.lr = 0.01, .weight_decay = 1e-2}, step);
    k::adam_update(adam.f64, grad.f64, m.f64, v.f64, {.lr = 0.01, .weight_decay = 1e-2}, step);
    k::adagrad_update(ada.f32, grad.f32, acc.f32, {.lr = 0.05, .weight_decay = 1e-2});
    k::adagrad_update(ada.f64, grad.f64, acc.f64, {.lr = 0.05, .weight_decay = 1e-2});
  }
  check(sgd.f32, sgd.f64, "sgd param");
  check(buf.f32, buf.f64, "sgd momentum");
  check(adam.f32, adam.f64, "adam param");
  check(ada.f32, ada.f64, "adagrad param");
}

BOOST_AUTO_TEST_SUITE_END()
