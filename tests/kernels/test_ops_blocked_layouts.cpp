// The F32 CPU convolutions run oneDNN's blocked-layout kernels (nChw16c activations, blocked
// weights) behind plain NCHW/OIHW tensors, converting through per-thread scratch buffers; batch
// norm runs own per-channel loops. These shapes are wide enough for oneDNN to pick blocked
// layouts; the results must match the F64 reference loops, accumulate correctly, repeat bit for
// bit, and stay right when threads with different shapes share the primitive caches.
#include <thread>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kernels/ops/batch_norm.h"
#include "kernels/ops/conv2d.h"
#include "kernels/ops/elementwise.h"
#include "tests/support/test_util.h"

namespace k = pw::kernels;
using k::DType;
using k::Tensor;

namespace {

using Pair = pw::test::PrecisionPair;
using pw::test::random_pair;

void check(const Tensor& f32, const Tensor& f64, const std::string& what) {
  pw::test::check_close(f32, f64, 1e-4, 1e-4, what);
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.to_double_vector() == b.to_double_vector();
}

struct ConvCase {
  k::Shape x, w;
  k::Conv2dParams p;
};

// ResNet-like layers: stem (1 input channel), 3x3 same, 3x3 stride 2, 1x1 stride 2 downsample,
// and channel counts that are not multiples of the 16-channel block.
std::vector<ConvCase> conv_cases() {
  return {{{4, 1, 12, 12}, {32, 1, 3, 3}, {.pad_h = 1, .pad_w = 1}},
          {{4, 32, 10, 9}, {32, 32, 3, 3}, {.pad_h = 1, .pad_w = 1}},
          {{3, 32, 11, 10}, {64, 32, 3, 3}, {.stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1}},
          {{3, 32, 11, 10}, {64, 32, 1, 1}, {.stride_h = 2, .stride_w = 2}},
          {{2, 24, 7, 7}, {40, 24, 3, 3}, {.pad_h = 1, .pad_w = 1}}};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ops_blocked_layouts)

BOOST_AUTO_TEST_CASE(conv2d_matches_the_f64_reference) {
  std::uint64_t seed = 100;
  for (const ConvCase& c : conv_cases()) {
    const std::string what = "conv2d x" + k::shape_str(c.x) + " w" + k::shape_str(c.w);
    const Pair x = random_pair(c.x, ++seed), w = random_pair(c.w, ++seed), b = random_pair({c.w[0]}, ++seed);
    const Pair r = random_pair(k::conv2d_output_shape(c.x, c.w, c.p), ++seed);
    check(k::conv2d_forward(x.f32, w.f32, b.f32, c.p), k::conv2d_forward(x.f64, w.f64, b.f64, c.p), what + " y");
    check(k::conv2d_forward(x.f32, w.f32, Tensor(), c.p), k::conv2d_forward(x.f64, w.f64, Tensor(), c.p),
          what + " y without bias");
    check(k::conv2d_backward_data(r.f32, w.f32, c.x, c.p), k::conv2d_backward_data(r.f64, w.f64, c.x, c.p),
          what + " grad_x");
    // Accumulates into non-zero gradients, twice (the second call reuses the cached primitive).
    Pair gw = random_pair(c.w, ++seed), gb = random_pair({c.w[0]}, ++seed);
    Tensor no_bias32, no_bias64;
    for (int call = 0; call < 2; ++call) {
      k::conv2d_backward_filter(x.f32, r.f32, gw.f32, gb.f32, c.p);
      k::conv2d_backward_filter(x.f64, r.f64, gw.f64, gb.f64, c.p);
    }
    check(gw.f32, gw.f64, what + " grad_w (bias)");
    check(gb.f32, gb.f64, what + " grad_bias");
    k::conv2d_backward_filter(x.f32, r.f32, gw.f32, no_bias32, c.p);
    k::conv2d_backward_filter(x.f64, r.f64, gw.f64, no_bias64, c.p);
    check(gw.f32, gw.f64, what + " grad_w (no bias)");
  }
}

// Each thread reuses the oneDNN memory objects it made, by address and layout: a tensor refilled
// in place, and a tensor of another shape at an address that held one before, must read what they
// hold now, as freshly made tensors do.
BOOST_AUTO_TEST_CASE(conv2d_reads_what_a_reused_address_holds_now) {
  const ConvCase c = conv_cases()[1];
  const Tensor w = pw::test::random_tensor(c.w, 1), other = pw::test::random_tensor(c.x, 2);
  Tensor x = pw::test::random_tensor(c.x, 3);
  const Tensor before = k::conv2d_forward(x, w, Tensor(), c.p);
  x.copy_from(other);
  BOOST_TEST(bitwise_equal(k::conv2d_forward(x, w, Tensor(), c.p), k::conv2d_forward(other, w, Tensor(), c.p)));
  BOOST_TEST(!bitwise_equal(k::conv2d_forward(x, w, Tensor(), c.p), before));
  for (const ConvCase& d : conv_cases()) {
    // Tensors come and go through the caching allocator, so addresses recur with other shapes.
    const Tensor xd = pw::test::random_tensor(d.x, 4), wd = pw::test::random_tensor(d.w, 5);
    const Tensor first = k::conv2d_forward(xd, wd, Tensor(), d.p);
    const Tensor copy = xd.clone();
    BOOST_TEST(bitwise_equal(k::conv2d_forward(copy, wd, Tensor(), d.p), first), k::shape_str(d.x));
  }
}

BOOST_AUTO_TEST_CASE(conv2d_is_bitwise_repeatable_across_threads) {
  // Per-thread scratch buffers grow and get reused across shapes: alternate the cases on several
  // threads and compare every result with a first, single-threaded run.
  const std::vector<ConvCase> cases = conv_cases();
  auto run_case = [](const ConvCase& c, std::uint64_t seed) {
    const Tensor x = pw::test::random_tensor(c.x, seed), w = pw::test::random_tensor(c.w, seed + 1);
    const Tensor r = pw::test::random_tensor(k::conv2d_output_shape(c.x, c.w, c.p), seed + 2);
    Tensor gw = Tensor::zeros(c.w, DType::F32), gb = Tensor::zeros({c.w[0]}, DType::F32);
    k::conv2d_backward_filter(x, r, gw, gb, c.p);
    return std::vector<Tensor>{k::conv2d_forward(x, w, Tensor(), c.p), k::conv2d_backward_data(r, w, c.x, c.p), gw, gb};
  };
  std::vector<std::vector<Tensor>> expected;
  for (std::size_t i = 0; i < cases.size(); ++i) expected.push_back(run_case(cases[i], 10 * i));
  constexpr int kThreads = 4;
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int repeat = 0; repeat < 3; ++repeat) {
        for (std::size_t j = 0; j < cases.size(); ++j) {
          const std::size_t i = (j + static_cast<std::size_t>(t)) % cases.size();
          const auto got = run_case(cases[i], 10 * i);
          for (std::size_t o = 0; o < got.size(); ++o) mismatches[t] += bitwise_equal(got[o], expected[i][o]) ? 0 : 1;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) BOOST_CHECK_EQUAL(mismatches[t], 0);
}

BOOST_AUTO_TEST_CASE(batch_norm_wide_shapes_match_the_f64_reference) {
  // Planes that are not multiples of the 16-float lanes, and ones that are.
  for (const k::Shape& shape : {k::Shape{8, 32, 7, 5}, k::Shape{2, 3, 20, 20}, k::Shape{5, 16, 4, 4}}) {
    const std::int64_t c = shape[1];
    const Pair x = random_pair(shape, 7, -1.0, 3.0), gamma = random_pair({c}, 8, 0.5, 1.5), beta = random_pair({c}, 9);
    const Pair r = random_pair(shape, 10);
    Pair rm = random_pair({c}, 11), rv = random_pair({c}, 12, 0.5, 2.0);
    Pair mean{Tensor::zeros({c}, DType::F32), Tensor::zeros({c}, DType::F64)};
    Pair invstd{Tensor::zeros({c}, DType::F32), Tensor::zeros({c}, DType::F64)};
    const k::BatchNormParams p{};
    const std::string what = "batch_norm " + k::shape_str(shape);
    const Tensor y32 = k::batch_norm_forward_train(x.f32, gamma.f32, beta.f32, rm.f32, rv.f32, mean.f32, invstd.f32, p);
    check(y32, k::batch_norm_forward_train(x.f64, gamma.f64, beta.f64, rm.f64, rv.f64, mean.f64, invstd.f64, p),
          what + " train y");
    check(rm.f32, rm.f64, what + " running_mean");
    check(rv.f32, rv.f64, what + " running_var");
    check(mean.f32, mean.f64, what + " save_mean");
    check(invstd.f32, invstd.f64, what + " save_invstd");
    const auto g32 = k::batch_norm_backward(x.f32, r.f32, gamma.f32, mean.f32, invstd.f32, p);
    const auto g64 = k::batch_norm_backward(x.f64, r.f64, gamma.f64, mean.f64, invstd.f64, p);
    check(g32.grad_x, g64.grad_x, what + " grad_x");
    check(g32.grad_gamma, g64.grad_gamma, what + " grad_gamma");
    check(g32.grad_beta, g64.grad_beta, what + " grad_beta");
    // Same inputs, same bits.
    Tensor rm2 = rm.f32.clone(), rv2 = rv.f32.clone(), mean2 = Tensor::zeros({c}, DType::F32),
           invstd2 = Tensor::zeros({c}, DType::F32);
    BOOST_CHECK(bitwise_equal(y32, k::batch_norm_forward_train(x.f32, gamma.f32, beta.f32, rm2, rv2, mean2, invstd2, p)));
    BOOST_CHECK(bitwise_equal(g32.grad_x, k::batch_norm_backward(x.f32, r.f32, gamma.f32, mean.f32, invstd.f32, p).grad_x));
  }
}

BOOST_AUTO_TEST_SUITE_END()
