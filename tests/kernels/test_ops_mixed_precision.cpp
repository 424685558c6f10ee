// Every op that mixed precision runs in 16 bits, in BF16 and in F16, against the F32 op on the same
// (rounded) inputs. Both sides then see identical values, so what differs is the 16-bit result's
// rounding and the order of F32 sums: the error, normalised by the reference's largest magnitude,
// is bounded by a few units of the format's roundoff (BF16 2^-9 = 2.0e-3, F16 2^-12 = 2.4e-4 for
// round-to-nearest; tolerances are 5 units, 1e-2 and 1.2e-3). Weight and bias gradients come out
// in F32 and differ only in summation order (1e-4). Also: the dtypes of every output, that weight
// gradients accumulate, that ReLU and max-pooling are exact, and that 16-bit operands are refused
// where the op keeps full precision.
#include <cstring>

#include <boost/test/unit_test.hpp>

#include "core/error.h"
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
#include "tests/support/test_util.h"

namespace k = pw::kernels;
using k::DType;
using k::Tensor;

namespace {

const DType kHalves[] = {DType::BF16, DType::F16};

double tolerance(DType d) { return d == DType::BF16 ? 1e-2 : 1.2e-3; }

// A random tensor rounded to `d`, and the same values in F32.
struct Rounded {
  Tensor half, wide;
};
Rounded rounded(const k::Shape& shape, std::uint64_t seed, DType d, double lo = -1.0, double hi = 1.0) {
  Tensor h = pw::test::random_tensor(shape, seed, lo, hi).to(d);
  return {h, h.to(DType::F32)};
}

// max |got - want| / max |want|.
double normalised_error(const Tensor& got, const Tensor& want) {
  const auto a = got.to_double_vector(), b = want.to_double_vector();
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  double err = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return scale > 0 ? err / scale : err;
}

// A 16-bit activation result against the F32 one.
void check_half(const Tensor& got, const Tensor& want, DType d, const std::string& what) {
  BOOST_TEST_CONTEXT(what << " in " << k::dtype_name(d)) {
    BOOST_CHECK(got.dtype() == d);
    BOOST_CHECK(got.shape() == want.shape());
    BOOST_CHECK_SMALL(normalised_error(got, want), tolerance(d));
  }
}

// An F32 gradient computed from 16-bit operands against the F32 op's.
void check_master(const Tensor& got, const Tensor& want, const std::string& what) {
  BOOST_TEST_CONTEXT(what) {
    BOOST_CHECK(got.dtype() == DType::F32);
    BOOST_CHECK_SMALL(normalised_error(got, want), 1e-4);
  }
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.nbytes() == b.nbytes() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ops_mixed_precision)

BOOST_AUTO_TEST_CASE(conv2d_forward_backward_data_and_accumulated_filter_gradients) {
  for (const DType d : kHalves) {
    for (const k::Conv2dParams p : {k::Conv2dParams{.pad_h = 1, .pad_w = 1},
                                    k::Conv2dParams{.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1}}) {
      const auto x = rounded({2, 8, 10, 10}, 1, d), w = rounded({6, 8, 3, 3}, 2, d);
      const Tensor bias = pw::test::random_tensor({6}, 3);
      const k::Shape y_shape = k::conv2d_output_shape(x.wide.shape(), w.wide.shape(), p);
      const auto gy = rounded(y_shape, 4, d);
      check_half(k::conv2d_forward(x.half, w.half, bias, p), k::conv2d_forward(x.wide, w.wide, bias, p), d, "conv y");
      check_half(k::conv2d_backward_data(gy.half, w.half, x.wide.shape(), p),
                 k::conv2d_backward_data(gy.wide, w.wide, x.wide.shape(), p), d, "conv grad_x");
      // Twice into the same F32 gradients: they accumulate, to twice the F32 reference.
      Tensor gw = Tensor::zeros(w.wide.shape()), gb = Tensor::zeros({6});
      Tensor gw_ref = Tensor::zeros(w.wide.shape()), gb_ref = Tensor::zeros({6});
      for (int i = 0; i < 2; ++i) k::conv2d_backward_filter(x.half, gy.half, gw, gb, p);
      k::conv2d_backward_filter(x.wide, gy.wide, gw_ref, gb_ref, p);
      k::scale_inplace(gw_ref, 2.0);
      k::scale_inplace(gb_ref, 2.0);
      check_master(gw, gw_ref, "conv grad_w");
      check_master(gb, gb_ref, "conv grad_bias");
    }
  }
}

BOOST_AUTO_TEST_CASE(linear_and_matmul) {
  for (const DType d : kHalves) {
    const auto x = rounded({16, 24}, 5, d), w = rounded({12, 24}, 6, d), gy = rounded({16, 12}, 7, d);
    const Tensor bias = pw::test::random_tensor({12}, 8);
    check_half(k::linear_forward(x.half, w.half, bias), k::linear_forward(x.wide, w.wide, bias), d, "linear y");
    check_half(k::linear_backward_data(gy.half, w.half), k::linear_backward_data(gy.wide, w.wide), d, "linear grad_x");
    Tensor gw = Tensor::zeros({12, 24}), gb = Tensor::zeros({12});
    Tensor gw_ref = Tensor::zeros({12, 24}), gb_ref = Tensor::zeros({12});
    for (int i = 0; i < 2; ++i) k::linear_backward_weight(x.half, gy.half, gw, gb);
    k::linear_backward_weight(x.wide, gy.wide, gw_ref, gb_ref);
    k::scale_inplace(gw_ref, 2.0);
    k::scale_inplace(gb_ref, 2.0);
    check_master(gw, gw_ref, "linear grad_w");
    check_master(gb, gb_ref, "linear grad_bias");
    check_half(k::matmul(x.half, w.half, k::Transpose::No, k::Transpose::Yes),
               k::matmul(x.wide, w.wide, k::Transpose::No, k::Transpose::Yes), d, "matmul");
  }
}

BOOST_AUTO_TEST_CASE(batch_norm_keeps_f32_statistics) {
  for (const DType d : kHalves) {
    for (const k::Shape& shape : {k::Shape{4, 3, 5, 6}, k::Shape{16, 7}}) {
      const std::int64_t c = shape[1];
      const auto x = rounded(shape, 9, d, -2.0, 3.0), gy = rounded(shape, 10, d);
      const Tensor gamma = pw::test::random_tensor({c}, 11, 0.5, 1.5), beta = pw::test::random_tensor({c}, 12);
      Tensor rm = Tensor::zeros({c}), rv = Tensor::full({c}, 1.0), rm_ref = rm.clone(), rv_ref = rv.clone();
      Tensor mean = Tensor::empty({c}), invstd = Tensor::empty({c}), mean_ref = Tensor::empty({c}),
             invstd_ref = Tensor::empty({c});
      const Tensor y = k::batch_norm_forward_train(x.half, gamma, beta, rm, rv, mean, invstd, {});
      const Tensor y_ref = k::batch_norm_forward_train(x.wide, gamma, beta, rm_ref, rv_ref, mean_ref, invstd_ref, {});
      check_half(y, y_ref, d, "batch-norm y");
      check_master(mean, mean_ref, "batch-norm save_mean");
      check_master(invstd, invstd_ref, "batch-norm save_invstd");
      check_master(rv, rv_ref, "batch-norm running_var");
      check_half(k::batch_norm_forward_eval(x.half, gamma, beta, rm, rv, {}),
                 k::batch_norm_forward_eval(x.wide, gamma, beta, rm_ref, rv_ref, {}), d, "batch-norm eval y");
      const auto g = k::batch_norm_backward(x.half, gy.half, gamma, mean, invstd, {});
      const auto g_ref = k::batch_norm_backward(x.wide, gy.wide, gamma, mean_ref, invstd_ref, {});
      check_half(g.grad_x, g_ref.grad_x, d, "batch-norm grad_x");
      check_master(g.grad_gamma, g_ref.grad_gamma, "batch-norm grad_gamma");
      check_master(g.grad_beta, g_ref.grad_beta, "batch-norm grad_beta");
    }
  }
}

BOOST_AUTO_TEST_CASE(pooling_relu_and_elementwise) {
  for (const DType d : kHalves) {
    const auto x = rounded({2, 3, 8, 8}, 13, d);
    const k::Pool2dParams p{.kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1};
    const auto gy = rounded(k::pool2d_output_shape(x.wide.shape(), p), 14, d);
    // The maximum of representable values is one of them: exact.
    const auto mp = k::max_pool2d_forward(x.half, p), mp_ref = k::max_pool2d_forward(x.wide, p);
    BOOST_CHECK(bitwise_equal(mp.y, mp_ref.y.to(d)));
    check_half(k::max_pool2d_backward(gy.half, mp.workspace, x.wide.shape(), p),
               k::max_pool2d_backward(gy.wide, mp_ref.workspace, x.wide.shape(), p), d, "max-pool grad_x");
    check_half(k::avg_pool2d_forward(x.half, p), k::avg_pool2d_forward(x.wide, p), d, "avg-pool y");
    check_half(k::avg_pool2d_backward(gy.half, x.wide.shape(), p), k::avg_pool2d_backward(gy.wide, x.wide.shape(), p),
               d, "avg-pool grad_x");
    check_half(k::adaptive_avg_pool2d_forward(x.half, 3, 3), k::adaptive_avg_pool2d_forward(x.wide, 3, 3), d,
               "adaptive-pool y");
    const auto ag = rounded({2, 3, 3, 3}, 15, d);
    check_half(k::adaptive_avg_pool2d_backward(ag.half, x.wide.shape()),
               k::adaptive_avg_pool2d_backward(ag.wide, x.wide.shape()), d, "adaptive-pool grad_x");

    const auto r = rounded({1000}, 16, d), g = rounded({1000}, 17, d);
    const Tensor y = k::relu_forward(r.half);
    BOOST_CHECK(bitwise_equal(y, k::relu_forward(r.wide).to(d)));
    BOOST_CHECK(bitwise_equal(k::relu_backward(y, g.half), k::relu_backward(y.to(DType::F32), g.wide).to(d)));

    check_half(k::add(r.half, g.half), k::add(r.wide, g.wide), d, "add");
    Tensor acc = r.half.clone(), acc_ref = r.wide.clone();
    k::add_inplace(acc, g.half, 0.5);
    k::add_inplace(acc_ref, g.wide, 0.5);
    check_half(acc, acc_ref, d, "add_inplace");
    Tensor scaled = r.half.clone(), scaled_ref = r.wide.clone();
    k::scale_inplace(scaled, -3.0);
    k::scale_inplace(scaled_ref, -3.0);
    check_half(scaled, scaled_ref, d, "scale_inplace");
    // Sums of the same values in double: equal up to the order of additions.
    BOOST_CHECK_CLOSE(k::sum(r.half), k::sum(r.wide), 1e-9);
    BOOST_CHECK_CLOSE(k::sum_of_squares(r.half), k::sum_of_squares(r.wide), 1e-9);

    const auto drop = k::dropout_forward(r.half, 0.3, 99), drop_ref = k::dropout_forward(r.wide, 0.3, 99);
    BOOST_CHECK(bitwise_equal(drop.mask, drop_ref.mask));
    check_half(drop.y, drop_ref.y, d, "dropout y");
    check_half(k::dropout_backward(g.half, drop.mask, 0.3), k::dropout_backward(g.wide, drop_ref.mask, 0.3), d,
               "dropout grad_x");
  }
}

BOOST_AUTO_TEST_CASE(the_tolerance_catches_a_wrong_result) {
  // The check can fail: a result off by 2% of its largest value is rejected in both formats.
  for (const DType d : kHalves) {
    const auto x = rounded({64}, 18, d);
    Tensor wrong = x.wide.clone();
    k::add_inplace(wrong, Tensor::full({64}, 0.02));
    BOOST_CHECK_GT(normalised_error(wrong.to(d), x.wide), tolerance(d));
  }
}

BOOST_AUTO_TEST_CASE(mixed_dtypes_and_full_precision_ops_are_refused) {
  const Tensor x = Tensor::zeros({2, 3, 5, 5}, DType::BF16), w32 = Tensor::zeros({4, 3, 3, 3});
  BOOST_CHECK_THROW(k::conv2d_forward(x, w32, Tensor(), {}), pw::Error);   // x BF16 with an F32 weight
  const Tensor w = w32.to(DType::BF16);
  Tensor gw_half = Tensor::zeros({4, 3, 3, 3}, DType::BF16), no_bias;
  const Tensor gy = Tensor::zeros({2, 4, 3, 3}, DType::BF16);
  BOOST_CHECK_THROW(k::conv2d_backward_filter(x, gy, gw_half, no_bias, {}), pw::Error);   // gradients stay F32
  BOOST_CHECK_THROW(k::conv2d_forward(x, w, Tensor::zeros({4}, DType::BF16), {}), pw::Error);   // bias stays F32
  const Tensor logits = Tensor::zeros({2, 4}, DType::BF16), labels = Tensor::zeros({2}, DType::I64);
  BOOST_CHECK_THROW(k::softmax_cross_entropy_forward(logits, labels), pw::Error);
  Tensor param = Tensor::zeros({4}, DType::BF16), grad = Tensor::zeros({4}, DType::BF16),
         mom = Tensor::zeros({4}, DType::BF16);
  BOOST_CHECK_THROW(k::sgd_update(param, grad, mom, {}, 1), pw::Error);
  BOOST_CHECK_THROW(k::embedding_gather(Tensor::zeros({5, 3}, DType::BF16), Tensor::zeros({2}, DType::I64)),
                    pw::Error);
}

BOOST_AUTO_TEST_SUITE_END()
