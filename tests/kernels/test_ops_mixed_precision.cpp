// Every op that mixed precision runs on 16-bit activations, in BF16 and in F16 on cpu:0, against the
// F32 op on the same values: random F32 inputs are rounded to the 16-bit dtype first and the F32
// reference runs on their exact widening, so both paths see identical operands and what differs is
// the 16-bit result's rounding (plus the order of F32 sums inside the kernels).
//
// Tolerances, from the formats' unit roundoff u = 2^-p (p significand bits, implicit bit included):
// BF16 p = 8, u = 2^-8 = 3.9e-3; F16 p = 11, u = 2^-11 = 4.9e-4. Round-to-nearest of one result y_i
// errs by at most u |y_i| <= u max|y|, so the error normalised by the reference's largest magnitude
// is <= 1 u for an op that computes in F32 and rounds once (every CPU path here, native or through
// F32). Different F32 summation orders add about K 2^-24 (K <= 72 products per output: ~4e-6, far
// below u). A few ops round more than once: add_inplace called twice, and the 16-bit backward of
// overlapping pooling windows, which may add up to 4 window contributions in the 16-bit format.
// We allow 3 u: 1.17e-2 for BF16, 1.46e-3 for F16, and require the error to be non-zero wherever
// the exact result needs more bits than the format has (so the comparison is not F32 against F32).
//
// Weight, bias, gamma and beta gradients and the batch-norm statistics are F32 outputs computed from
// the same (exactly representable) 16-bit operands: products of two 16-bit values are exact in F32,
// so they differ from the F32 op only in the order of F32 sums, <= K 2^-24 of the sum of |terms|
// (K <= 200 terms here, 1.2e-5). 2e-5 of the largest magnitude allows that (the terms have random
// signs, so the sum of |terms| is a few times the largest result, and the observed errors are
// far smaller) and is 25x below F16's u, so a gradient or statistic that passed through a 16-bit
// format would fail.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "core/error.h"
#include "kernels/ops/activation.h"
#include "kernels/ops/batch_norm.h"
#include "kernels/ops/conv2d.h"
#include "kernels/ops/dropout.h"
#include "kernels/ops/elementwise.h"
#include "kernels/ops/embedding.h"
#include "kernels/ops/half_support.h"
#include "kernels/ops/linear.h"
#include "kernels/ops/loss.h"
#include "kernels/ops/optimizer.h"
#include "kernels/ops/pool.h"
#include "tests/kernels/gradcheck.h"

namespace k = pw::kernels;
using k::DType;
using k::Tensor;

namespace {

const DType kHalves[] = {DType::BF16, DType::F16};

double unit_roundoff(DType d) { return d == DType::BF16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11); }

// 3 units of roundoff on the max-normalised error (see the top of the file): 1.17e-2 and 1.46e-3.
double tolerance(DType d) { return 3.0 * unit_roundoff(d); }

// F32 outputs from 16-bit operands: F32 summation order only (see the top of the file).
constexpr double kMasterTolerance = 2e-5;

// Double sums of the same values in another order: n 2^-53 of the sum of |terms| (n = 1000 here).
constexpr double kSumTolerance = 1e-12;

// A random tensor rounded to `d`, and the same values exactly in F32.
struct Rounded {
  Tensor half, wide;
};

Rounded rounded(const k::Shape& shape, std::uint64_t seed, DType d, double lo = -1.0, double hi = 1.0) {
  const Tensor h = pw::test::random_tensor(shape, seed, lo, hi).to(d);
  return {h, h.to(DType::F32)};
}

// max |got - want| / max |want| (the plain max error where want is all zero).
double normalised_error(const Tensor& got, const Tensor& want) {
  const auto a = got.to_double_vector(), b = want.to_double_vector();
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  double err = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double e = std::abs(a[i] - b[i]);
    err = std::isnan(e) ? HUGE_VAL : std::max(err, e);
    scale = std::max(scale, std::abs(b[i]));
  }
  return scale > 0 ? err / scale : err;
}

enum class Rounds { Yes, No };

// A 16-bit activation result against the F32 op's. With Rounds::Yes the exact result needs more
// bits than the format has somewhere, so the error must also be non-zero: this catches a 16-bit
// path that silently produced (or a test that compared) F32 values.
void check_half(const Tensor& got, const Tensor& want, DType d, const std::string& what, Rounds rounds = Rounds::Yes) {
  BOOST_TEST_CONTEXT(what << " in " << k::dtype_name(d)) {
    BOOST_REQUIRE(got.defined());
    BOOST_CHECK(got.dtype() == d);
    BOOST_CHECK(want.dtype() == DType::F32);
    BOOST_REQUIRE(got.shape() == want.shape());
    const double err = normalised_error(got, want);
    BOOST_TEST_MESSAGE(what << " " << k::dtype_name(d) << ": normalised error " << err << " = "
                            << err / unit_roundoff(d) << " u");
    BOOST_CHECK_SMALL(err, tolerance(d));
    if (rounds == Rounds::Yes) BOOST_CHECK_GT(err, 0.0);
  }
}

// An F32 output (a weight, bias, gamma or beta gradient, a batch-norm statistic) computed from
// 16-bit operands, against the F32 op's.
void check_master(const Tensor& got, const Tensor& want, DType d, const std::string& what) {
  BOOST_TEST_CONTEXT(what << " from " << k::dtype_name(d)) {
    BOOST_CHECK(got.dtype() == DType::F32);
    BOOST_REQUIRE(got.shape() == want.shape());
    const double err = normalised_error(got, want);
    BOOST_TEST_MESSAGE(what << " from " << k::dtype_name(d) << ": normalised error " << err);
    BOOST_CHECK_SMALL(err, kMasterTolerance);
  }
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// `start` plus twice `once`: what an accumulating op called twice leaves in `start`.
Tensor plus_twice(const Tensor& start, const Tensor& once) {
  Tensor t = start.clone();
  k::add_inplace(t, once, 2.0);
  return t;
}

// True when the message names every fragment (the op, the tensor, the dtype).
auto message_has(std::vector<std::string> fragments) {
  return [fragments = std::move(fragments)](const pw::Error& e) {
    const std::string what = e.what();
    for (const auto& f : fragments) {
      if (what.find(f) == std::string::npos) {
        BOOST_TEST_MESSAGE("missing '" << f << "' in: " << what);
        return false;
      }
    }
    return true;
  };
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ops_mixed_precision)

BOOST_AUTO_TEST_CASE(conv2d_forward_backward_data_and_accumulated_filter_gradients) {
  // Which BF16 path this run exercises (--log_level=message): native, emulated or through F32.
  BOOST_TEST_MESSAGE("BF16 on this CPU: " << k::cpu_bf16_description());
  for (const DType d : kHalves) {
    for (const k::Conv2dParams p : {k::Conv2dParams{.pad_h = 1, .pad_w = 1},
                                    k::Conv2dParams{.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1}}) {
      const std::string s = " (stride " + std::to_string(p.stride_h) + ")";
      const auto x = rounded({2, 8, 10, 10}, 1, d), w = rounded({12, 8, 3, 3}, 2, d);
      const Tensor bias = pw::test::random_tensor({12}, 3);   // F32 beside 16-bit activations
      const k::Shape y_shape = k::conv2d_output_shape(x.wide.shape(), w.wide.shape(), p);
      const auto gy = rounded(y_shape, 4, d);
      check_half(k::conv2d_forward(x.half, w.half, bias, p), k::conv2d_forward(x.wide, w.wide, bias, p), d,
                 "conv y" + s);
      check_half(k::conv2d_forward(x.half, w.half, Tensor(), p), k::conv2d_forward(x.wide, w.wide, Tensor(), p), d,
                 "conv y without bias" + s);
      check_half(k::conv2d_backward_data(gy.half, w.half, x.wide.shape(), p),
                 k::conv2d_backward_data(gy.wide, w.wide, x.wide.shape(), p), d, "conv grad_x" + s);

      // The F32 gradients accumulate: twice into non-zero gradients leaves start + 2 * (one pass).
      Tensor once_w = Tensor::zeros(w.wide.shape()), once_b = Tensor::zeros({12});
      k::conv2d_backward_filter(x.wide, gy.wide, once_w, once_b, p);
      const Tensor start_w = pw::test::random_tensor(w.wide.shape(), 5), start_b = pw::test::random_tensor({12}, 6);
      Tensor gw = start_w.clone(), gb = start_b.clone();
      for (int i = 0; i < 2; ++i) k::conv2d_backward_filter(x.half, gy.half, gw, gb, p);
      check_master(gw, plus_twice(start_w, once_w), d, "conv grad_w (twice)" + s);
      check_master(gb, plus_twice(start_b, once_b), d, "conv grad_bias (twice)" + s);
      Tensor gw_only = start_w.clone(), no_bias;
      k::conv2d_backward_filter(x.half, gy.half, gw_only, no_bias, p);
      k::conv2d_backward_filter(x.half, gy.half, gw_only, no_bias, p);
      check_master(gw_only, plus_twice(start_w, once_w), d, "conv grad_w without bias (twice)" + s);
    }
  }
}

BOOST_AUTO_TEST_CASE(linear_and_matmul) {
  for (const DType d : kHalves) {
    const auto x = rounded({16, 24}, 7, d), w = rounded({12, 24}, 8, d), gy = rounded({16, 12}, 9, d);
    const Tensor bias = pw::test::random_tensor({12}, 10);
    check_half(k::linear_forward(x.half, w.half, bias), k::linear_forward(x.wide, w.wide, bias), d, "linear y");
    check_half(k::linear_forward(x.half, w.half, Tensor()), k::linear_forward(x.wide, w.wide, Tensor()), d,
               "linear y without bias");
    check_half(k::linear_backward_data(gy.half, w.half), k::linear_backward_data(gy.wide, w.wide), d, "linear grad_x");

    Tensor once_w = Tensor::zeros({12, 24}), once_b = Tensor::zeros({12});
    k::linear_backward_weight(x.wide, gy.wide, once_w, once_b);
    const Tensor start_w = pw::test::random_tensor({12, 24}, 11), start_b = pw::test::random_tensor({12}, 12);
    Tensor gw = start_w.clone(), gb = start_b.clone();
    for (int i = 0; i < 2; ++i) k::linear_backward_weight(x.half, gy.half, gw, gb);
    check_master(gw, plus_twice(start_w, once_w), d, "linear grad_w (twice)");
    check_master(gb, plus_twice(start_b, once_b), d, "linear grad_bias (twice)");

    check_half(k::matmul(x.half, w.half, k::Transpose::No, k::Transpose::Yes),
               k::matmul(x.wide, w.wide, k::Transpose::No, k::Transpose::Yes), d, "matmul x w^T");
    check_half(k::matmul(gy.half, x.half, k::Transpose::Yes, k::Transpose::No),
               k::matmul(gy.wide, x.wide, k::Transpose::Yes, k::Transpose::No), d, "matmul gy^T x");
    check_half(k::matmul(gy.half, w.half, k::Transpose::No, k::Transpose::No),
               k::matmul(gy.wide, w.wide, k::Transpose::No, k::Transpose::No), d, "matmul gy w");
  }
}

BOOST_AUTO_TEST_CASE(batch_norm_keeps_f32_parameters_and_statistics) {
  for (const DType d : kHalves) {
    for (const k::Shape& shape : {k::Shape{4, 3, 5, 6}, k::Shape{16, 7}}) {
      const std::int64_t c = shape[1];
      const std::string s = " " + k::shape_str(shape);
      // Off-centre inputs, so the mean matters.
      const auto x = rounded(shape, 13, d, -1.0, 3.0), gy = rounded(shape, 14, d);
      const Tensor gamma = pw::test::random_tensor({c}, 15, 0.5, 1.5), beta = pw::test::random_tensor({c}, 16);
      Tensor rm = pw::test::random_tensor({c}, 17), rv = pw::test::random_tensor({c}, 18, 0.5, 2.0);
      Tensor rm_ref = rm.clone(), rv_ref = rv.clone();
      Tensor mean = Tensor::zeros({c}), invstd = Tensor::zeros({c});
      Tensor mean_ref = Tensor::zeros({c}), invstd_ref = Tensor::zeros({c});
      const k::BatchNormParams p{.momentum = 0.2, .eps = 1e-3};
      check_half(k::batch_norm_forward_train(x.half, gamma, beta, rm, rv, mean, invstd, p),
                 k::batch_norm_forward_train(x.wide, gamma, beta, rm_ref, rv_ref, mean_ref, invstd_ref, p), d,
                 "batch-norm train y" + s);
      check_master(mean, mean_ref, d, "batch-norm save_mean" + s);
      check_master(invstd, invstd_ref, d, "batch-norm save_invstd" + s);
      check_master(rm, rm_ref, d, "batch-norm running_mean" + s);
      check_master(rv, rv_ref, d, "batch-norm running_var" + s);
      check_half(k::batch_norm_forward_eval(x.half, gamma, beta, rm, rv, p),
                 k::batch_norm_forward_eval(x.wide, gamma, beta, rm_ref, rv_ref, p), d, "batch-norm eval y" + s);
      const auto g = k::batch_norm_backward(x.half, gy.half, gamma, mean, invstd, p);
      const auto g_ref = k::batch_norm_backward(x.wide, gy.wide, gamma, mean_ref, invstd_ref, p);
      check_half(g.grad_x, g_ref.grad_x, d, "batch-norm grad_x" + s);
      check_master(g.grad_gamma, g_ref.grad_gamma, d, "batch-norm grad_gamma" + s);
      check_master(g.grad_beta, g_ref.grad_beta, d, "batch-norm grad_beta" + s);
    }
  }
}

BOOST_AUTO_TEST_CASE(max_pool_forward_is_exact) {
  // The maximum of representable values is one of them: the 16-bit result equals the F32 one
  // rounded (which rounds nothing), bit for bit, ties included.
  for (const DType d : kHalves) {
    for (const k::Pool2dParams p :
         {k::Pool2dParams{}, k::Pool2dParams{.kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1,
                                             .pad_w = 1}}) {
      const auto x = rounded({2, 3, 8, 8}, 19, d);
      const auto m = k::max_pool2d_forward(x.half, p), m_ref = k::max_pool2d_forward(x.wide, p);
      BOOST_CHECK(m.y.dtype() == d);
      BOOST_CHECK(bitwise_equal(m.y, m_ref.y.to(d)));
    }
  }
}

BOOST_AUTO_TEST_CASE(max_pool_backward) {
  for (const DType d : kHalves) {
    // Non-overlapping and overlapping windows (where the 16-bit backward adds contributions).
    for (const k::Pool2dParams p :
         {k::Pool2dParams{}, k::Pool2dParams{.kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1,
                                             .pad_w = 1}}) {
      // Distinct inputs (multiples of 2^-6 within +-3, exact in both formats): the arg-max, and so
      // where the gradient goes, cannot depend on how a tie is broken.
      const Tensor wide = pw::test::distinct_f64({2, 3, 8, 8}, 20, 0.015625).to(DType::F32);
      const Tensor half = wide.to(d);
      BOOST_REQUIRE(bitwise_equal(half.to(DType::F32), wide));
      const auto gy = rounded(k::pool2d_output_shape(wide.shape(), p), 21, d);
      const auto m = k::max_pool2d_forward(half, p), m_ref = k::max_pool2d_forward(wide, p);
      BOOST_CHECK(bitwise_equal(m.y, m_ref.y.to(d)));
      // Without overlap every input gets one gradient or none: a copy, exact.
      const Rounds rounds = p.stride_h < p.kernel_h ? Rounds::Yes : Rounds::No;
      const Tensor gx = k::max_pool2d_backward(gy.half, m.workspace, wide.shape(), p);
      const Tensor gx_ref = k::max_pool2d_backward(gy.wide, m_ref.workspace, wide.shape(), p);
      check_half(gx, gx_ref, d, "max-pool grad_x (kernel " + std::to_string(p.kernel_h) + ")", rounds);
      if (rounds == Rounds::No) BOOST_CHECK(bitwise_equal(gx, gx_ref.to(d)));
    }
  }
}

BOOST_AUTO_TEST_CASE(avg_and_adaptive_avg_pool) {
  for (const DType d : kHalves) {
    for (const k::Pool2dParams p :
         {k::Pool2dParams{}, k::Pool2dParams{.kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1,
                                             .pad_w = 1}}) {
      const std::string s = " (kernel " + std::to_string(p.kernel_h) + ")";
      const auto x = rounded({2, 3, 8, 8}, 22, d);
      const auto gy = rounded(k::pool2d_output_shape(x.wide.shape(), p), 23, d);
      check_half(k::avg_pool2d_forward(x.half, p), k::avg_pool2d_forward(x.wide, p), d, "avg-pool y" + s);
      // Without overlap each input gets grad_y / 4: exact (a power of two), bit for bit.
      const Rounds rounds = p.stride_h < p.kernel_h ? Rounds::Yes : Rounds::No;
      const Tensor gx = k::avg_pool2d_backward(gy.half, x.wide.shape(), p);
      const Tensor gx_ref = k::avg_pool2d_backward(gy.wide, x.wide.shape(), p);
      check_half(gx, gx_ref, d, "avg-pool grad_x" + s, rounds);
      if (rounds == Rounds::No) BOOST_CHECK(bitwise_equal(gx, gx_ref.to(d)));
    }
    // 7x5 to 3x4: bins of unequal size that overlap.
    const auto x = rounded({2, 3, 7, 5}, 24, d), gy = rounded({2, 3, 3, 4}, 25, d);
    check_half(k::adaptive_avg_pool2d_forward(x.half, 3, 4), k::adaptive_avg_pool2d_forward(x.wide, 3, 4), d,
               "adaptive-avg-pool y");
    check_half(k::adaptive_avg_pool2d_backward(gy.half, x.wide.shape()),
               k::adaptive_avg_pool2d_backward(gy.wide, x.wide.shape()), d, "adaptive-avg-pool grad_x");
  }
}

BOOST_AUTO_TEST_CASE(relu_is_exact) {
  // max(x, 0) of a representable value is representable, and the backward selects grad_y values.
  for (const DType d : kHalves) {
    const auto x = rounded({3, 5, 7, 11}, 26, d), gy = rounded({3, 5, 7, 11}, 27, d);
    const Tensor y = k::relu_forward(x.half), y_ref = k::relu_forward(x.wide);
    BOOST_CHECK(y.dtype() == d);
    BOOST_CHECK(bitwise_equal(y, y_ref.to(d)));
    const Tensor gx = k::relu_backward(y, gy.half);
    BOOST_CHECK(gx.dtype() == d);
    BOOST_CHECK(bitwise_equal(gx, k::relu_backward(y_ref, gy.wide).to(d)));
    // Not vacuous: some values pass and some are zeroed.
    BOOST_CHECK_GT(k::sum(y), 0.0);
    BOOST_CHECK_LT(k::sum_of_squares(y), k::sum_of_squares(x.half));
  }
}

BOOST_AUTO_TEST_CASE(add_scale_and_sums) {
  for (const DType d : kHalves) {
    const auto a = rounded({1000}, 28, d), b = rounded({1000}, 29, d, -4.0, 4.0);
    check_half(k::add(a.half, b.half), k::add(a.wide, b.wide), d, "add");

    // add_inplace accumulates: twice leaves a + 2 * alpha * b (rounded after each call).
    Tensor acc = a.half.clone(), acc_ref = a.wide.clone();
    for (int i = 0; i < 2; ++i) {
      k::add_inplace(acc, b.half, 0.375);
      k::add_inplace(acc_ref, b.wide, 0.375);
    }
    check_half(acc, acc_ref, d, "add_inplace (twice)");
    Tensor a_plus_b = a.wide.clone();
    k::add_inplace(a_plus_b, b.wide, 0.75);
    check_half(acc, a_plus_b, d, "add_inplace (twice) against a + 0.75 b");

    Tensor scaled = a.half.clone(), scaled_ref = a.wide.clone();
    k::scale_inplace(scaled, -3.3);
    k::scale_inplace(scaled_ref, -3.3);
    check_half(scaled, scaled_ref, d, "scale_inplace");

    // Sums return double: the same values summed in double, normalised per element by the sum of
    // |terms| (the sum itself may be near zero), and sum_of_squares by itself (all terms >= 0).
    const auto v = a.wide.to_double_vector();
    double exact = 0.0, abs_total = 0.0, squares = 0.0;
    for (const double e : v) {
      exact += e;
      abs_total += std::abs(e);
      squares += e * e;
    }
    BOOST_CHECK_SMALL(std::abs(k::sum(a.half) - k::sum(a.wide)) / abs_total, kSumTolerance);
    BOOST_CHECK_SMALL(std::abs(k::sum(a.half) - exact) / abs_total, kSumTolerance);
    BOOST_CHECK_SMALL(std::abs(k::sum_of_squares(a.half) - k::sum_of_squares(a.wide)) / squares, kSumTolerance);
    BOOST_CHECK_SMALL(std::abs(k::sum_of_squares(a.half) - squares) / squares, kSumTolerance);

    // The batched form: each tensor's sum_of_squares bit for bit, in order (empty ones give 0).
    const std::vector<Tensor> ts = {a.half, a.wide, Tensor::empty({0}, DType::F32, a.wide.device()),
                                    a.wide.view(3, {5})};
    const std::vector<double> batched = k::sums_of_squares(ts);
    BOOST_REQUIRE_EQUAL(batched.size(), ts.size());
    for (std::size_t i = 0; i < ts.size(); ++i) BOOST_CHECK_EQUAL(batched[i], k::sum_of_squares(ts[i]));
    BOOST_CHECK_EQUAL(batched[2], 0.0);
  }
}

BOOST_AUTO_TEST_CASE(dropout_same_mask_in_every_dtype) {
  for (const DType d : kHalves) {
    const auto x = rounded({33, 17}, 30, d), gy = rounded({33, 17}, 31, d);
    const auto r = k::dropout_forward(x.half, 0.3, 99), r_ref = k::dropout_forward(x.wide, 0.3, 99);
    BOOST_CHECK(r.mask.dtype() == DType::U8);
    BOOST_CHECK(bitwise_equal(r.mask, r_ref.mask));
    check_half(r.y, r_ref.y, d, "dropout y");   // kept values times 1 / 0.7: rounded
    check_half(k::dropout_backward(gy.half, r.mask, 0.3), k::dropout_backward(gy.wide, r_ref.mask, 0.3), d,
               "dropout grad_x");
  }
}

BOOST_AUTO_TEST_CASE(the_checks_can_fail) {
  for (const DType d : kHalves) {
    const auto x = rounded({2, 8, 10, 10}, 32, d), w = rounded({12, 8, 3, 3}, 33, d);
    const Tensor y = k::conv2d_forward(x.half, w.half, Tensor(), {.pad_h = 1, .pad_w = 1});
    const Tensor y_ref = k::conv2d_forward(x.wide, w.wide, Tensor(), {.pad_h = 1, .pad_w = 1});
    const double err = normalised_error(y, y_ref);
    BOOST_CHECK_GT(err, 0.0);
    BOOST_CHECK_LE(err, tolerance(d));
    // One output element off by 4 units of roundoff of the largest value: rejected.
    double top = 0.0;
    for (const double v : y_ref.to_double_vector()) top = std::max(top, std::abs(v));
    Tensor one_off = y.to(DType::F32);
    one_off.data<float>()[123] += static_cast<float>(4.0 * unit_roundoff(d) * top);
    BOOST_CHECK_GT(normalised_error(one_off, y_ref), tolerance(d));
    // Rounded once more through BF16: an F16 result that lost 3 bits is rejected; for BF16 itself
    // this is a no-op and passes.
    const double twice = normalised_error(y.to(DType::BF16).to(d), y_ref);
    if (d == DType::F16) BOOST_CHECK_GT(twice, tolerance(d));
    else BOOST_CHECK_LE(twice, tolerance(d));
    // A weight gradient that went through the 16-bit format is rejected by the F32 tolerance.
    Tensor gw = Tensor::zeros(w.wide.shape()), no_bias;
    k::conv2d_backward_filter(x.wide, y_ref, gw, no_bias, {.pad_h = 1, .pad_w = 1});
    BOOST_CHECK_GT(normalised_error(gw.to(d), gw), kMasterTolerance);
  }
}

BOOST_AUTO_TEST_CASE(mixed_dtypes_are_refused) {
  for (const DType d : kHalves) {
    const DType other = d == DType::BF16 ? DType::F16 : DType::BF16;
    const Tensor x = Tensor::zeros({2, 3, 5, 5}, d), w = Tensor::zeros({4, 3, 3, 3}, d);
    const Tensor gy = Tensor::zeros({2, 4, 3, 3}, d), bias = Tensor::zeros({4});
    Tensor gw = Tensor::zeros({4, 3, 3, 3}), gb = Tensor::zeros({4}), no_bias;
    // The same calls with matching dtypes work, so what is refused below is the dtype alone.
    BOOST_CHECK_NO_THROW(k::conv2d_forward(x, w, bias, {}));
    BOOST_CHECK_NO_THROW(k::conv2d_backward_filter(x, gy, gw, gb, {}));

    BOOST_CHECK_EXCEPTION(k::conv2d_forward(x, w.to(DType::F32), bias, {}), pw::Error,
                          message_has({"conv2d_forward", "w"}));
    BOOST_CHECK_EXCEPTION(k::conv2d_forward(x, w.to(other), bias, {}), pw::Error, message_has({"conv2d_forward"}));
    BOOST_CHECK_EXCEPTION(k::conv2d_forward(x, w, bias.to(d), {}), pw::Error,
                          message_has({"conv2d_forward", "bias", "F32"}));
    BOOST_CHECK_EXCEPTION(k::conv2d_backward_data(gy, w.to(DType::F32), x.shape(), {}), pw::Error,
                          message_has({"conv2d_backward_data"}));
    Tensor gw_half = Tensor::zeros({4, 3, 3, 3}, d), gb_half = Tensor::zeros({4}, d);
    BOOST_CHECK_EXCEPTION(k::conv2d_backward_filter(x, gy, gw_half, no_bias, {}), pw::Error,
                          message_has({"conv2d_backward_filter", "grad_w", "F32"}));
    BOOST_CHECK_EXCEPTION(k::conv2d_backward_filter(x, gy, gw, gb_half, {}), pw::Error,
                          message_has({"conv2d_backward_filter", "grad_bias", "F32"}));
    BOOST_CHECK_EXCEPTION(k::conv2d_backward_filter(x, gy.to(DType::F32), gw, gb, {}), pw::Error,
                          message_has({"conv2d_backward_filter"}));

    const Tensor lx = Tensor::zeros({4, 6}, d), lw = Tensor::zeros({3, 6}, d), lgy = Tensor::zeros({4, 3}, d);
    Tensor lgw = Tensor::zeros({3, 6}), lgw_half = Tensor::zeros({3, 6}, d), lgb = Tensor::zeros({3});
    BOOST_CHECK_NO_THROW(k::linear_backward_weight(lx, lgy, lgw, lgb));
    BOOST_CHECK_EXCEPTION(k::linear_forward(lx, lw.to(DType::F32), Tensor()), pw::Error,
                          message_has({"linear_forward"}));
    BOOST_CHECK_EXCEPTION(k::linear_forward(lx, lw, Tensor::zeros({3}, d)), pw::Error,
                          message_has({"linear_forward", "bias"}));
    BOOST_CHECK_EXCEPTION(k::linear_backward_data(lgy, lw.to(other)), pw::Error, message_has({"linear_backward_data"}));
    BOOST_CHECK_EXCEPTION(k::linear_backward_weight(lx, lgy, lgw_half, lgb), pw::Error,
                          message_has({"linear_backward_weight", "grad_w"}));
    BOOST_CHECK_EXCEPTION(k::matmul(lx, lw.to(DType::F32), k::Transpose::No, k::Transpose::Yes), pw::Error,
                          message_has({"matmul"}));

    // Batch norm: parameters and statistics stay F32, x and grad_y share one dtype.
    const Tensor bx = Tensor::zeros({4, 3}, d);
    Tensor g32 = Tensor::full({3}, 1.0), b32 = Tensor::zeros({3}), rm = Tensor::zeros({3}), rv = Tensor::full({3}, 1.0);
    Tensor mean = Tensor::zeros({3}), invstd = Tensor::full({3}, 1.0), mean_half = Tensor::zeros({3}, d);
    BOOST_CHECK_NO_THROW(k::batch_norm_forward_train(bx, g32, b32, rm, rv, mean, invstd, {}));
    BOOST_CHECK_EXCEPTION(k::batch_norm_forward_train(bx, g32.to(d), b32, rm, rv, mean, invstd, {}), pw::Error,
                          message_has({"batch_norm_forward_train", "gamma", "F32"}));
    BOOST_CHECK_EXCEPTION(k::batch_norm_forward_train(bx, g32, b32, rm, rv, mean_half, invstd, {}), pw::Error,
                          message_has({"batch_norm_forward_train", "save_mean", "F32"}));
    BOOST_CHECK_EXCEPTION(k::batch_norm_forward_eval(bx, g32, b32, rm.to(d), rv, {}), pw::Error,
                          message_has({"batch_norm_forward_eval", "running_mean"}));
    BOOST_CHECK_EXCEPTION(k::batch_norm_backward(bx, bx.to(DType::F32), g32, mean, invstd, {}), pw::Error,
                          message_has({"batch_norm_backward", "grad_y"}));

    // Element-wise ops take one dtype.
    Tensor dst = Tensor::zeros({5}, d);
    BOOST_CHECK_EXCEPTION(k::add(dst, Tensor::zeros({5}, other)), pw::Error, message_has({"add"}));
    BOOST_CHECK_EXCEPTION(k::add_inplace(dst, Tensor::zeros({5})), pw::Error, message_has({"add_inplace"}));
    BOOST_CHECK_EXCEPTION(k::relu_backward(dst, Tensor::zeros({5})), pw::Error, message_has({"relu_backward"}));
  }
}

BOOST_AUTO_TEST_CASE(full_precision_ops_refuse_16_bit_operands) {
  // Losses, optimizer updates and embedding tables stay F32/F64 in mixed precision.
  for (const DType d : kHalves) {
    const Tensor labels = Tensor::from_vector(std::vector<std::int64_t>{0, 3}, {2});
    const Tensor logits = pw::test::random_tensor({2, 4}, 34);
    BOOST_CHECK_NO_THROW(k::softmax_cross_entropy_forward(logits, labels));
    BOOST_CHECK_EXCEPTION(k::softmax_cross_entropy_forward(logits.to(d), labels), pw::Error,
                          message_has({"softmax_cross_entropy_forward", "logits", k::dtype_name(d)}));
    BOOST_CHECK_EXCEPTION(k::softmax_cross_entropy_backward(logits.to(d), labels, 0.5), pw::Error,
                          message_has({"softmax_cross_entropy_backward", "probs"}));

    Tensor param = pw::test::random_tensor({4}, 35), grad = pw::test::random_tensor({4}, 36), buf = Tensor::zeros({4});
    BOOST_CHECK_NO_THROW(k::sgd_update(param, grad, buf, {.momentum = 0.9}, 1));
    Tensor param_half = param.to(d), buf_half = buf.to(d);
    BOOST_CHECK_EXCEPTION(k::sgd_update(param_half, grad.to(d), buf_half, {.momentum = 0.9}, 1), pw::Error,
                          message_has({"sgd_update", "param"}));
    BOOST_CHECK_EXCEPTION(k::sgd_update(param, grad.to(d), buf, {.momentum = 0.9}, 1), pw::Error,
                          message_has({"sgd_update", "grad"}));
    Tensor m = Tensor::zeros({4}), v = Tensor::zeros({4}), sum_sq = Tensor::zeros({4});
    BOOST_CHECK_EXCEPTION(k::adam_update(param_half, grad.to(d), m, v, {}, 1), pw::Error, message_has({"adam_update"}));
    BOOST_CHECK_EXCEPTION(k::adagrad_update(param, grad.to(d), sum_sq, {}), pw::Error, message_has({"adagrad_update"}));

    const Tensor table = pw::test::random_tensor({5, 3}, 37), ids = Tensor::from_vector(std::vector<std::int64_t>{1, 4}, {2});
    BOOST_CHECK_NO_THROW(k::embedding_gather(table, ids));
    BOOST_CHECK_EXCEPTION(k::embedding_gather(table.to(d), ids), pw::Error,
                          message_has({"embedding_gather", "table", k::dtype_name(d)}));
    Tensor grad_table = Tensor::zeros({5, 3}), grad_table_half = Tensor::zeros({5, 3}, d);
    BOOST_CHECK_EXCEPTION(k::embedding_scatter_add(grad_table_half, ids, Tensor::zeros({2, 3}, d)), pw::Error,
                          message_has({"embedding_scatter_add", "grad_table"}));
    BOOST_CHECK_EXCEPTION(k::embedding_scatter_add(grad_table, ids, Tensor::zeros({2, 3}, d)), pw::Error,
                          message_has({"embedding_scatter_add", "grad_rows"}));
  }
}

BOOST_AUTO_TEST_SUITE_END()
