// The CUDA op library against the CPU reference: every op on fresh random inputs, run on cuda:0
// and on cpu:0 through the public entry points, forward and backward compared. The 16-bit cases
// (BF16, F16: cuDNN and cuBLAS on tensor cores, own element-wise kernels) compare against the CPU's
// F32 op on the same rounded inputs. Without a GPU the executable prints "skipped: no CUDA device"
// and exits 77 (ctest: Skipped).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

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
#include "kernels/safetensors.h"
#include "kernels/stream.h"
#include "tests/support/test_util.h"

// The macro pastes its argument into an identifier, so it needs an unqualified name.
using pw::test::RequireCudaOrSkip;
BOOST_TEST_GLOBAL_FIXTURE(RequireCudaOrSkip);

namespace pk = pw::kernels;
using pk::Device;
using pk::DType;
using pk::Shape;
using pk::Tensor;
using pw::test::check_close;
using pw::test::random_tensor;

namespace {

const Device kCpu = Device::cpu(0);
const Device kGpu = Device::cuda(0);

// Tolerances: element-wise ops are nearly exact; reductions (GEMM, convolution, batch norm) add
// in another order on the GPU. TF32 is off in both cuBLAS and cuDNN.
constexpr double kRtol = 1e-4, kAtol = 1e-5;
constexpr double kSumRtol = 1e-4, kSumAtol = 1e-4;
constexpr double kConvRtol = 1e-3, kConvAtol = 3e-4;   // Winograd / FFT algorithms round differently

Tensor gpu(const Tensor& t) { return t.to(kGpu); }

// Bit-for-bit equality (check_close divides by its tolerance, so it cannot express "exact").
void check_exact(const Tensor& a, const Tensor& b, const char* what) {
  BOOST_REQUIRE_MESSAGE(a.shape() == b.shape(), what << ": shapes " << a.describe() << " vs " << b.describe());
  const auto va = a.to_double_vector();
  const auto vb = b.to_double_vector();
  std::size_t mismatches = 0, first = 0;
  for (std::size_t i = 0; i < va.size(); ++i) {
    if (va[i] != vb[i] && !(std::isnan(va[i]) && std::isnan(vb[i]))) {
      if (mismatches++ == 0) first = i;
    }
  }
  BOOST_CHECK_MESSAGE(mismatches == 0, what << ": " << mismatches << " of " << va.size() << " elements differ, first at "
                                            << first << ": " << (va.empty() ? 0 : va[first]) << " vs "
                                            << (vb.empty() ? 0 : vb[first]));
}

// Norm-wise relative error ||a - ref|| / ||ref|| against an F64 reference.
double rel_error(const Tensor& a, const Tensor& ref) {
  const auto va = a.to_double_vector();
  const auto vr = ref.to_double_vector();
  BOOST_REQUIRE_EQUAL(va.size(), vr.size());
  double num = 0.0, den = 0.0;
  for (std::size_t i = 0; i < va.size(); ++i) {
    num += (va[i] - vr[i]) * (va[i] - vr[i]);
    den += vr[i] * vr[i];
  }
  return den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
}

// One output of an op at training size: the CUDA F32 result and the CPU F32 result, each against
// the CPU's F64 loops. Both F32 paths must land near F64; the message gives the two figures, so
// a GPU run shows which side a CPU-against-CUDA difference comes from.
void check_against_f64(const Tensor& cuda_f32, const Tensor& cpu_f32, const Tensor& f64, const std::string& what) {
  const double e_cuda = rel_error(cuda_f32, f64), e_cpu = rel_error(cpu_f32, f64);
  BOOST_TEST_MESSAGE(what << ": relative error against F64: cuda " << e_cuda << ", cpu " << e_cpu);
  BOOST_CHECK_MESSAGE(e_cuda <= std::max(1e-5, 10.0 * e_cpu),
                      what << ": CUDA F32 is " << e_cuda << " from F64, the CPU's F32 " << e_cpu);
}

Tensor random_ids(std::int64_t n, std::int64_t upper, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int64_t> dist(0, upper - 1);
  std::vector<std::int64_t> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = dist(rng);
  return Tensor::from_vector(v, {n}, kCpu);
}

void check_conv(const Shape& xs, const Shape& ws, const pk::Conv2dParams& p, bool with_bias, std::uint64_t seed) {
  const Tensor x = random_tensor(xs, seed);
  const Tensor w = random_tensor(ws, seed + 1);
  const Tensor b = with_bias ? random_tensor({ws[0]}, seed + 2) : Tensor();
  const Tensor y_cpu = pk::conv2d_forward(x, w, b, p);
  const Tensor y_gpu = pk::conv2d_forward(gpu(x), gpu(w), with_bias ? gpu(b) : Tensor(), p);
  check_close(y_gpu, y_cpu, kConvRtol, kConvAtol, "conv2d_forward");

  const Tensor gy = random_tensor(y_cpu.shape(), seed + 3);
  check_close(pk::conv2d_backward_data(gpu(gy), gpu(w), xs, p), pk::conv2d_backward_data(gy, w, xs, p), kConvRtol,
              kConvAtol, "conv2d_backward_data");

  // backward_filter accumulates: start both from the same non-zero gradients, run twice.
  Tensor gw_cpu = random_tensor(ws, seed + 4);
  Tensor gb_cpu = with_bias ? random_tensor({ws[0]}, seed + 5) : Tensor();
  Tensor gw_gpu = gpu(gw_cpu);
  Tensor gb_gpu = with_bias ? gpu(gb_cpu) : Tensor();
  for (int rep = 0; rep < 2; ++rep) {
    pk::conv2d_backward_filter(x, gy, gw_cpu, gb_cpu, p);
    pk::conv2d_backward_filter(gpu(x), gpu(gy), gw_gpu, gb_gpu, p);
  }
  check_close(gw_gpu, gw_cpu, kConvRtol, kConvAtol, "conv2d_backward_filter grad_w");
  if (with_bias) check_close(gb_gpu, gb_cpu, kConvRtol, kConvAtol, "conv2d_backward_filter grad_bias");
}

void check_batch_norm(const Shape& xs, std::uint64_t seed) {
  const std::int64_t c = xs[1];
  const Tensor x = random_tensor(xs, seed, -2.0, 3.0);
  const Tensor gamma = random_tensor({c}, seed + 1, 0.5, 1.5);
  const Tensor beta = random_tensor({c}, seed + 2);
  const pk::BatchNormParams p{0.1, 1e-5};

  Tensor rm_cpu = random_tensor({c}, seed + 3), rv_cpu = random_tensor({c}, seed + 4, 0.5, 2.0);
  Tensor rm_gpu = gpu(rm_cpu), rv_gpu = gpu(rv_cpu);
  Tensor sm_cpu = Tensor::zeros({c}, DType::F32, kCpu), si_cpu = Tensor::zeros({c}, DType::F32, kCpu);
  Tensor sm_gpu = Tensor::zeros({c}, DType::F32, kGpu), si_gpu = Tensor::zeros({c}, DType::F32, kGpu);
  const Tensor y_cpu = pk::batch_norm_forward_train(x, gamma, beta, rm_cpu, rv_cpu, sm_cpu, si_cpu, p);
  const Tensor y_gpu =
      pk::batch_norm_forward_train(gpu(x), gpu(gamma), gpu(beta), rm_gpu, rv_gpu, sm_gpu, si_gpu, p);
  check_close(y_gpu, y_cpu, kSumRtol, kSumAtol, "batch_norm_forward_train y");
  check_close(rm_gpu, rm_cpu, kSumRtol, kSumAtol, "batch_norm running_mean");
  check_close(rv_gpu, rv_cpu, kSumRtol, kSumAtol, "batch_norm running_var (unbiased)");
  check_close(sm_gpu, sm_cpu, kSumRtol, kSumAtol, "batch_norm save_mean");
  check_close(si_gpu, si_cpu, kSumRtol, kSumAtol, "batch_norm save_invstd");

  check_close(pk::batch_norm_forward_eval(gpu(x), gpu(gamma), gpu(beta), rm_gpu, rv_gpu, p),
              pk::batch_norm_forward_eval(x, gamma, beta, rm_cpu, rv_cpu, p), kSumRtol, kSumAtol,
              "batch_norm_forward_eval");

  const Tensor gy = random_tensor(xs, seed + 5);
  const pk::BatchNormGrads g_cpu = pk::batch_norm_backward(x, gy, gamma, sm_cpu, si_cpu, p);
  const pk::BatchNormGrads g_gpu = pk::batch_norm_backward(gpu(x), gpu(gy), gpu(gamma), sm_gpu, si_gpu, p);
  check_close(g_gpu.grad_x, g_cpu.grad_x, kSumRtol, kSumAtol, "batch_norm_backward grad_x");
  check_close(g_gpu.grad_gamma, g_cpu.grad_gamma, kSumRtol, kSumAtol, "batch_norm_backward grad_gamma");
  check_close(g_gpu.grad_beta, g_cpu.grad_beta, kSumRtol, kSumAtol, "batch_norm_backward grad_beta");
}

void check_pools(const Shape& xs, const pk::Pool2dParams& p, std::uint64_t seed) {
  const Tensor x = random_tensor(xs, seed);
  const pk::MaxPoolResult m_cpu = pk::max_pool2d_forward(x, p);
  const pk::MaxPoolResult m_gpu = pk::max_pool2d_forward(gpu(x), p);
  check_exact(m_gpu.y, m_cpu.y, "max_pool2d_forward");
  const Tensor gy = random_tensor(m_cpu.y.shape(), seed + 1);
  check_close(pk::max_pool2d_backward(gpu(gy), m_gpu.workspace, xs, p), pk::max_pool2d_backward(gy, m_cpu.workspace, xs, p),
              kRtol, kAtol, "max_pool2d_backward");

  const Tensor a_cpu = pk::avg_pool2d_forward(x, p);
  check_close(pk::avg_pool2d_forward(gpu(x), p), a_cpu, kRtol, kAtol, "avg_pool2d_forward");
  check_close(pk::avg_pool2d_backward(gpu(gy), xs, p), pk::avg_pool2d_backward(gy, xs, p), kRtol, kAtol,
              "avg_pool2d_backward");
}

void check_adaptive(const Shape& xs, int oh, int ow, std::uint64_t seed) {
  const Tensor x = random_tensor(xs, seed);
  const Tensor y_cpu = pk::adaptive_avg_pool2d_forward(x, oh, ow);
  check_close(pk::adaptive_avg_pool2d_forward(gpu(x), oh, ow), y_cpu, kRtol, kAtol, "adaptive_avg_pool2d_forward");
  const Tensor gy = random_tensor(y_cpu.shape(), seed + 1);
  check_close(pk::adaptive_avg_pool2d_backward(gpu(gy), xs), pk::adaptive_avg_pool2d_backward(gy, xs), kRtol, kAtol,
              "adaptive_avg_pool2d_backward");
}

// ---- 16-bit data ----------------------------------------------------------------------------------
// A 16-bit op on cuda:0 against the CPU's F32 op on the same values (the 16-bit inputs widened):
// both see identical inputs, so what differs is the rounding of the 16-bit result (and, for
// convolutions, of the product before the F32 bias is added, and of cuDNN's 16-bit weight gradient)
// and the order of the F32 sums. The error, normalised by the reference's largest magnitude, stays
// within a few units of the format's roundoff (BF16 2^-9 = 2.0e-3, F16 2^-12 = 2.4e-4).

const DType kHalves[] = {DType::BF16, DType::F16};

double half_tolerance(DType d) { return d == DType::BF16 ? 1e-2 : 2e-3; }
// F32 results of 16-bit inputs that are never rounded to 16 bits (cuBLAS writes the linear weight
// gradient in F32, the bias gradients are F32 sums): only the order of the sums differs (well
// under 1e-4; a weight gradient rounded to BF16 on the way would show as ~2e-3).
constexpr double kMasterTol = 1e-3;

// Random values rounded to `d`: the 16-bit tensor on cuda:0 and the same values in F32 on cpu:0.
struct Rounded {
  Tensor half, wide;
};
Rounded rounded(const Shape& shape, std::uint64_t seed, DType d, double lo = -1.0, double hi = 1.0) {
  const Tensor h = random_tensor(shape, seed, lo, hi).to(d);
  return {gpu(h), h.to(DType::F32)};
}

// max |got - want| / max |want|.
double normalised_error(const Tensor& got, const Tensor& want) {
  const auto a = got.to_double_vector(), b = want.to_double_vector();
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  double err = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double e = std::abs(a[i] - b[i]);
    err = std::isnan(e) ? std::numeric_limits<double>::infinity() : std::max(err, e);
    scale = std::max(scale, std::abs(b[i]));
  }
  return scale > 0 ? err / scale : err;
}

void check_normalised(const Tensor& got, const Tensor& want, DType dtype, double tol, const std::string& what) {
  BOOST_TEST_CONTEXT(what) {
    BOOST_CHECK(got.device() == kGpu);
    BOOST_CHECK(got.dtype() == dtype);
    BOOST_REQUIRE(got.shape() == want.shape());
    const double err = normalised_error(got, want);
    BOOST_CHECK_MESSAGE(err <= tol, "normalised error " << err << " over " << tol);
  }
}

// A 16-bit activation result (on cuda:0, in `d`) against the F32 CPU one.
void check_half(const Tensor& got, const Tensor& want, DType d, const std::string& what) {
  check_normalised(got, want, d, half_tolerance(d), what + " in " + pk::dtype_name(d));
}

void check_half_conv(const Shape& xs, const Shape& ws, const pk::Conv2dParams& p, bool with_bias, DType d,
                     std::uint64_t seed) {
  const auto x = rounded(xs, seed, d), w = rounded(ws, seed + 1, d);
  const Tensor b = with_bias ? random_tensor({ws[0]}, seed + 2) : Tensor();   // F32 master bias
  const Tensor y_ref = pk::conv2d_forward(x.wide, w.wide, b, p);
  check_half(pk::conv2d_forward(x.half, w.half, with_bias ? gpu(b) : Tensor(), p), y_ref, d, "conv2d_forward");

  const auto gy = rounded(y_ref.shape(), seed + 3, d);
  check_half(pk::conv2d_backward_data(gy.half, w.half, xs, p), pk::conv2d_backward_data(gy.wide, w.wide, xs, p), d,
             "conv2d_backward_data");

  // F32 gradients accumulate: from the same non-zero start, twice on each side. cuDNN hands back
  // the weight gradient in the 16-bit type before it is added, hence the 16-bit tolerance there.
  Tensor gw_ref = random_tensor(ws, seed + 4);
  Tensor gb_ref = with_bias ? random_tensor({ws[0]}, seed + 5) : Tensor();
  Tensor gw = gpu(gw_ref), gb = with_bias ? gpu(gb_ref) : Tensor();
  for (int rep = 0; rep < 2; ++rep) {
    pk::conv2d_backward_filter(x.wide, gy.wide, gw_ref, gb_ref, p);
    pk::conv2d_backward_filter(x.half, gy.half, gw, gb, p);
  }
  const std::string in = std::string(" in ") + pk::dtype_name(d);
  check_normalised(gw, gw_ref, DType::F32, half_tolerance(d), "conv2d_backward_filter grad_w (accumulated)" + in);
  if (with_bias)
    check_normalised(gb, gb_ref, DType::F32, kMasterTol, "conv2d_backward_filter grad_bias (accumulated)" + in);
}

void check_half_linear(std::int64_t n, std::int64_t k, std::int64_t m, bool with_bias, DType d, std::uint64_t seed) {
  const auto x = rounded({n, k}, seed, d), w = rounded({m, k}, seed + 1, d), gy = rounded({n, m}, seed + 2, d);
  const Tensor b = with_bias ? random_tensor({m}, seed + 3) : Tensor();
  check_half(pk::linear_forward(x.half, w.half, with_bias ? gpu(b) : Tensor()), pk::linear_forward(x.wide, w.wide, b),
             d, "linear_forward");
  check_half(pk::linear_backward_data(gy.half, w.half), pk::linear_backward_data(gy.wide, w.wide), d,
             "linear_backward_data");
  Tensor gw_ref = random_tensor({m, k}, seed + 4);
  Tensor gb_ref = with_bias ? random_tensor({m}, seed + 5) : Tensor();
  Tensor gw = gpu(gw_ref), gb = with_bias ? gpu(gb_ref) : Tensor();
  for (int rep = 0; rep < 2; ++rep) {
    pk::linear_backward_weight(x.wide, gy.wide, gw_ref, gb_ref);
    pk::linear_backward_weight(x.half, gy.half, gw, gb);
  }
  const std::string in = std::string(" in ") + pk::dtype_name(d);
  check_normalised(gw, gw_ref, DType::F32, kMasterTol, "linear_backward_weight grad_w (accumulated)" + in);
  if (with_bias)
    check_normalised(gb, gb_ref, DType::F32, kMasterTol, "linear_backward_weight grad_bias (accumulated)" + in);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(ops_cuda)

BOOST_AUTO_TEST_CASE(conv2d_matches_cpu) {
  check_conv({2, 3, 9, 9}, {4, 3, 3, 3}, {2, 2, 1, 1}, true, 11);
  check_conv({3, 5, 8, 7}, {6, 5, 3, 1}, {1, 1, 0, 0}, false, 21);
  check_conv({2, 8, 16, 16}, {16, 8, 5, 5}, {1, 1, 2, 2}, true, 31);
  check_conv({4, 16, 7, 7}, {8, 16, 1, 1}, {1, 1, 0, 0}, true, 41);
}

BOOST_AUTO_TEST_CASE(batch_norm_matches_cpu) {
  check_batch_norm({4, 3, 5, 5}, 101);
  check_batch_norm({8, 6}, 111);
  check_batch_norm({2, 16, 9, 11}, 121);
}

BOOST_AUTO_TEST_CASE(relu_matches_cpu) {
  const Tensor x = random_tensor({3, 4, 5, 6}, 201);
  const Tensor y_cpu = pk::relu_forward(x);
  const Tensor y_gpu = pk::relu_forward(gpu(x));
  check_exact(y_gpu, y_cpu, "relu_forward");
  const Tensor gy = random_tensor(x.shape(), 202);
  check_exact(pk::relu_backward(y_gpu, gpu(gy)), pk::relu_backward(y_cpu, gy), "relu_backward");
}

BOOST_AUTO_TEST_CASE(pools_match_cpu) {
  check_pools({2, 3, 8, 8}, {2, 2, 2, 2, 0, 0}, 301);
  check_pools({2, 4, 9, 7}, {3, 3, 2, 2, 1, 1}, 311);
  check_pools({1, 2, 10, 10}, {3, 3, 1, 1, 1, 1}, 321);
  check_pools({2, 3, 11, 6}, {3, 2, 3, 1, 0, 1}, 331);
  check_adaptive({2, 3, 7, 9}, 3, 4, 341);
  check_adaptive({2, 5, 8, 8}, 1, 1, 351);
  check_adaptive({1, 2, 5, 6}, 7, 9, 361);   // output larger than input: overlapping windows
}

BOOST_AUTO_TEST_CASE(linear_matches_cpu) {
  for (bool with_bias : {true, false}) {
    const Tensor x = random_tensor({17, 33}, 401);
    const Tensor w = random_tensor({12, 33}, 402);
    const Tensor b = with_bias ? random_tensor({12}, 403) : Tensor();
    const Tensor y_cpu = pk::linear_forward(x, w, b);
    check_close(pk::linear_forward(gpu(x), gpu(w), with_bias ? gpu(b) : Tensor()), y_cpu, kSumRtol, kSumAtol,
                "linear_forward");
    const Tensor gy = random_tensor(y_cpu.shape(), 404);
    check_close(pk::linear_backward_data(gpu(gy), gpu(w)), pk::linear_backward_data(gy, w), kSumRtol, kSumAtol,
                "linear_backward_data");
    Tensor gw_cpu = random_tensor(w.shape(), 405);
    Tensor gb_cpu = with_bias ? random_tensor({12}, 406) : Tensor();
    Tensor gw_gpu = gpu(gw_cpu);
    Tensor gb_gpu = with_bias ? gpu(gb_cpu) : Tensor();
    for (int rep = 0; rep < 2; ++rep) {
      pk::linear_backward_weight(x, gy, gw_cpu, gb_cpu);
      pk::linear_backward_weight(gpu(x), gpu(gy), gw_gpu, gb_gpu);
    }
    check_close(gw_gpu, gw_cpu, kSumRtol, kSumAtol, "linear_backward_weight grad_w (accumulated)");
    if (with_bias) check_close(gb_gpu, gb_cpu, kSumRtol, kSumAtol, "linear_backward_weight grad_bias (accumulated)");
  }
  // A bias gradient over many rows exercises the column reduction's row loop.
  const Tensor x = random_tensor({1000, 5}, 407);
  const Tensor gy = random_tensor({1000, 70}, 408);
  Tensor gw_cpu = Tensor::zeros({70, 5}, DType::F32, kCpu), gb_cpu = Tensor::zeros({70}, DType::F32, kCpu);
  Tensor gw_gpu = Tensor::zeros({70, 5}, DType::F32, kGpu), gb_gpu = Tensor::zeros({70}, DType::F32, kGpu);
  pk::linear_backward_weight(x, gy, gw_cpu, gb_cpu);
  pk::linear_backward_weight(gpu(x), gpu(gy), gw_gpu, gb_gpu);
  check_close(gw_gpu, gw_cpu, kSumRtol, kSumAtol, "linear_backward_weight grad_w, 1000 rows");
  check_close(gb_gpu, gb_cpu, kSumRtol, kSumAtol, "linear_backward_weight grad_bias, 1000 rows");
}

BOOST_AUTO_TEST_CASE(matmul_matches_cpu) {
  const std::int64_t m = 13, k = 29, n = 7;
  for (auto ta : {pk::Transpose::No, pk::Transpose::Yes}) {
    for (auto tb : {pk::Transpose::No, pk::Transpose::Yes}) {
      const Tensor a = random_tensor(ta == pk::Transpose::No ? Shape{m, k} : Shape{k, m}, 501);
      const Tensor b = random_tensor(tb == pk::Transpose::No ? Shape{k, n} : Shape{n, k}, 502);
      const Tensor c_cpu = pk::matmul(a, b, ta, tb);
      BOOST_REQUIRE(c_cpu.shape() == (Shape{m, n}));
      check_close(pk::matmul(gpu(a), gpu(b), ta, tb), c_cpu, kSumRtol, kSumAtol, "matmul");
    }
  }
}

BOOST_AUTO_TEST_CASE(elementwise_matches_cpu) {
  const Tensor a = random_tensor({5, 7, 11}, 601);
  const Tensor b = random_tensor({5, 7, 11}, 602);
  check_close(pk::add(gpu(a), gpu(b)), pk::add(a, b), kRtol, kAtol, "add");

  Tensor d_cpu = a.clone();
  Tensor d_gpu = gpu(a);
  pk::add_inplace(d_cpu, b, 0.5);
  pk::add_inplace(d_gpu, gpu(b), 0.5);
  check_close(d_gpu, d_cpu, kRtol, kAtol, "add_inplace alpha 0.5");
  pk::add_inplace(d_cpu, b);
  pk::add_inplace(d_gpu, gpu(b));
  check_close(d_gpu, d_cpu, kRtol, kAtol, "add_inplace alpha 1");
  pk::scale_inplace(d_cpu, -1.75);
  pk::scale_inplace(d_gpu, -1.75);
  check_close(d_gpu, d_cpu, kRtol, kAtol, "scale_inplace");

  // Large enough for many partial blocks; sums compared in double.
  const Tensor big = random_tensor({3'000'001}, 603);
  const Tensor big_gpu = gpu(big);
  const double s_cpu = pk::sum(big), s_gpu = pk::sum(big_gpu);
  BOOST_CHECK_CLOSE_FRACTION(s_gpu, s_cpu, 1e-6);
  BOOST_CHECK_SMALL(s_gpu - s_cpu, 1e-3);
  BOOST_CHECK_CLOSE_FRACTION(pk::sum_of_squares(big_gpu), pk::sum_of_squares(big), 1e-9);
  // Deterministic: the same tensor gives the same bits.
  BOOST_CHECK_EQUAL(pk::sum(big_gpu), s_gpu);
  BOOST_CHECK_EQUAL(pk::sum_of_squares(big_gpu), pk::sum_of_squares(big_gpu));
  BOOST_CHECK_CLOSE_FRACTION(pk::sum(gpu(a)), pk::sum(a), 1e-9);
  BOOST_CHECK_EQUAL(pk::sum(Tensor::zeros({0}, DType::F32, kGpu)), 0.0);
}

// CUDA's round-to-nearest-even intrinsics against the CPU conversion, on PyTorch's edge cases and
// many magnitudes (the golden file test_cast checks the CPU side against PyTorch).
BOOST_AUTO_TEST_CASE(cast_matches_cpu_bit_for_bit) {
  const auto golden = pk::load_safetensors(pw::test::source_dir() + "/tests/golden/half_golden.safetensors");
  const Tensor& x = golden.at("input");
  for (const DType half : {DType::BF16, DType::F16}) {
    const Tensor on_gpu = gpu(x).to(half);
    BOOST_TEST((on_gpu.device() == kGpu && on_gpu.dtype() == half));
    check_exact(on_gpu.to(kCpu).to(DType::F32), x.to(half).to(DType::F32), "F32 -> half on cuda:0");
    check_exact(on_gpu.to(DType::F32), gpu(x.to(half).to(DType::F32)), "half -> F32 on cuda:0");
    check_exact(gpu(x).to(DType::F64).to(half).to(DType::F32), on_gpu.to(DType::F32), "F64 -> half on cuda:0");
  }
}

// Past the largest grid (65535 blocks of 256 threads = 2^24 - 256 elements): the grid-stride loops
// must wrap and reach the last elements.
BOOST_AUTO_TEST_CASE(elementwise_ops_reach_past_one_grid) {
  const std::int64_t n = (std::int64_t{1} << 24) + 3;
  const Tensor a = random_tensor({n}, 611);
  const Tensor b = random_tensor({n}, 612);
  check_exact(pk::add(gpu(a), gpu(b)), pk::add(a, b), "add of 2^24+3 elements");
  Tensor s_cpu = a.clone(), s_gpu = gpu(a);
  pk::scale_inplace(s_cpu, 3.0);
  pk::scale_inplace(s_gpu, 3.0);
  check_exact(s_gpu, s_cpu, "scale_inplace of 2^24+3 elements");
  check_exact(pk::relu_forward(gpu(a)), pk::relu_forward(a), "relu of 2^24+3 elements");
  BOOST_TEST(s_gpu.to_double_vector().back() == s_cpu.to_double_vector().back());   // the last element was reached
  BOOST_TEST(s_gpu.to_double_vector().back() != a.to_double_vector().back());
  // 16-byte packs of 4 floats: past one grid of packs (65535 blocks of 256) only beyond 2^26.
  const Tensor big = random_tensor({(std::int64_t{1} << 26) + 5}, 613);
  check_exact(pk::relu_forward(gpu(big)), pk::relu_forward(big), "relu of 2^26+5 elements");
}

// The packed element-wise kernels (16-byte accesses) at every alignment and tail length: views
// that start off a 16-byte boundary take the one-element path; both give the CPU's bits.
BOOST_AUTO_TEST_CASE(packed_element_ops_match_cpu_at_any_offset_and_length) {
  for (const DType d : {DType::F32, DType::BF16, DType::F16}) {
    const Tensor a = random_tensor({1200}, 621).to(d), b = random_tensor({1200}, 622).to(d);
    const Tensor ga = gpu(a), gb = gpu(b);
    // The second operand at the same offset (both aligned or neither) and 2 elements on (mixed).
    for (const std::int64_t offset : {0, 1, 3, 8, 16}) {
      for (const std::int64_t shift : {0, 2}) {
        for (const std::int64_t length : {1, 7, 8, 9, 31, 517}) {
          BOOST_TEST_CONTEXT(pk::dtype_name(d) << ", offsets " << offset << " and " << offset + shift << ", length "
                                               << length) {
            const Tensor x = a.view(offset, {length}), y = b.view(offset + shift, {length});
            const Tensor gx = ga.view(offset, {length}), gy = gb.view(offset + shift, {length});
            check_exact(pk::relu_forward(gx), pk::relu_forward(x), "relu_forward");
            check_exact(pk::relu_backward(gx, gy), pk::relu_backward(x, y), "relu_backward");
            check_exact(pk::add(gx, gy), pk::add(x, y), "add");
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(dropout_mask_is_bit_identical) {
  for (double p : {0.0, 0.3, 0.5, 0.9}) {
    const Tensor x = random_tensor({4, 3, 50, 41}, 701);
    const std::uint64_t seed = 0xC0FFEEull + static_cast<std::uint64_t>(p * 100);
    const pk::DropoutResult r_cpu = pk::dropout_forward(x, p, seed);
    const pk::DropoutResult r_gpu = pk::dropout_forward(gpu(x), p, seed);
    BOOST_REQUIRE(r_gpu.mask.dtype() == DType::U8);
    check_exact(r_gpu.mask, r_cpu.mask, "dropout mask");
    check_exact(r_gpu.y, r_cpu.y, "dropout_forward y");
    const Tensor gy = random_tensor(x.shape(), 702);
    check_exact(pk::dropout_backward(gpu(gy), r_gpu.mask, p), pk::dropout_backward(gy, r_cpu.mask, p),
                "dropout_backward");
  }
  // Another seed draws another mask.
  const Tensor x = random_tensor({1000}, 703);
  BOOST_CHECK(pk::dropout_forward(gpu(x), 0.5, 1).mask.to_double_vector() !=
              pk::dropout_forward(gpu(x), 0.5, 2).mask.to_double_vector());
}

BOOST_AUTO_TEST_CASE(softmax_cross_entropy_matches_cpu) {
  const std::pair<std::int64_t, std::int64_t> cases[] = {{16, 10}, {37, 1000}, {3, 1}};
  for (const auto& [rows, classes] : cases) {
    const Tensor logits = random_tensor({rows, classes}, 801, -4.0, 4.0);
    const Tensor labels = random_ids(rows, classes, 802);
    const pk::CrossEntropyResult r_cpu = pk::softmax_cross_entropy_forward(logits, labels);
    const pk::CrossEntropyResult r_gpu = pk::softmax_cross_entropy_forward(gpu(logits), gpu(labels));
    BOOST_CHECK_CLOSE_FRACTION(r_gpu.loss, r_cpu.loss, 1e-5);
    BOOST_CHECK_EQUAL(r_gpu.correct, r_cpu.correct);
    check_close(r_gpu.probs, r_cpu.probs, kRtol, kAtol, "softmax probs");
    const double scale = 1.0 / static_cast<double>(rows);
    check_close(pk::softmax_cross_entropy_backward(r_gpu.probs, gpu(labels), scale),
                pk::softmax_cross_entropy_backward(r_cpu.probs, labels, scale), kRtol, kAtol,
                "softmax_cross_entropy_backward");
  }
  const Tensor logits = random_tensor({2, 3}, 803);
  const Tensor bad = Tensor::from_vector(std::vector<std::int64_t>{0, 3}, {2}, kGpu);
  BOOST_CHECK_THROW(pk::softmax_cross_entropy_forward(gpu(logits), bad), pw::Error);
}

BOOST_AUTO_TEST_CASE(embedding_matches_cpu) {
  const Tensor table = random_tensor({20, 8}, 901);
  const Tensor ids = random_ids(64, 20, 902);   // many repeats
  check_exact(pk::embedding_gather(gpu(table), gpu(ids)), pk::embedding_gather(table, ids), "embedding_gather");
  const Tensor rows = random_tensor({64, 8}, 903);
  Tensor g_cpu = random_tensor({20, 8}, 904);
  Tensor g_gpu = gpu(g_cpu);
  pk::embedding_scatter_add(g_cpu, ids, rows);
  pk::embedding_scatter_add(g_gpu, gpu(ids), gpu(rows));
  check_close(g_gpu, g_cpu, kRtol, kAtol, "embedding_scatter_add");

  const Tensor bad = Tensor::from_vector(std::vector<std::int64_t>{1, 20}, {2}, kGpu);
  BOOST_CHECK_THROW(pk::embedding_gather(gpu(table), bad), pw::Error);
  Tensor g = gpu(g_cpu);
  BOOST_CHECK_THROW(pk::embedding_scatter_add(g, bad, gpu(random_tensor({2, 8}, 905))), pw::Error);
}

BOOST_AUTO_TEST_CASE(optimizers_match_cpu_over_three_steps) {
  const Shape s{37, 11};
  const Tensor p0 = random_tensor(s, 1001);
  {
    for (double momentum : {0.0, 0.9}) {
      const pk::SgdParams sp{0.05, momentum, 1e-2};
      Tensor w_cpu = p0.clone(), buf_cpu = Tensor::zeros(s, DType::F32, kCpu);
      Tensor w_gpu = gpu(p0), buf_gpu = Tensor::zeros(s, DType::F32, kGpu);
      for (std::int64_t step = 1; step <= 3; ++step) {
        const Tensor g = random_tensor(s, 1100 + static_cast<std::uint64_t>(step));
        pk::sgd_update(w_cpu, g, buf_cpu, sp, step);
        pk::sgd_update(w_gpu, gpu(g), buf_gpu, sp, step);
      }
      check_close(w_gpu, w_cpu, kRtol, kAtol, "sgd param");
      if (momentum != 0.0) check_close(buf_gpu, buf_cpu, kRtol, kAtol, "sgd momentum buffer");
    }
  }
  {
    const pk::AdamParams ap{1e-2, 0.9, 0.999, 1e-8, 1e-2};
    Tensor w_cpu = p0.clone(), m_cpu = Tensor::zeros(s, DType::F32, kCpu), v_cpu = Tensor::zeros(s, DType::F32, kCpu);
    Tensor w_gpu = gpu(p0), m_gpu = Tensor::zeros(s, DType::F32, kGpu), v_gpu = Tensor::zeros(s, DType::F32, kGpu);
    for (std::int64_t step = 1; step <= 3; ++step) {
      const Tensor g = random_tensor(s, 1200 + static_cast<std::uint64_t>(step));
      pk::adam_update(w_cpu, g, m_cpu, v_cpu, ap, step);
      pk::adam_update(w_gpu, gpu(g), m_gpu, v_gpu, ap, step);
    }
    check_close(w_gpu, w_cpu, kRtol, kAtol, "adam param");
    check_close(m_gpu, m_cpu, kRtol, kAtol, "adam m");
    check_close(v_gpu, v_cpu, kRtol, kAtol, "adam v");
  }
  {
    const pk::AdagradParams gp{5e-2, 1e-10, 1e-3};
    Tensor w_cpu = p0.clone(), s_cpu = Tensor::zeros(s, DType::F32, kCpu);
    Tensor w_gpu = gpu(p0), s_gpu = Tensor::zeros(s, DType::F32, kGpu);
    for (std::int64_t step = 1; step <= 3; ++step) {
      const Tensor g = random_tensor(s, 1300 + static_cast<std::uint64_t>(step));
      pk::adagrad_update(w_cpu, g, s_cpu, gp);
      pk::adagrad_update(w_gpu, gpu(g), s_gpu, gp);
    }
    check_close(w_gpu, w_cpu, kRtol, kAtol, "adagrad param");
    check_close(s_gpu, s_cpu, kRtol, kAtol, "adagrad sum of squares");
  }
}

// Two threads, each on its own stream (as two pipeline stages sharing a GPU), run cuDNN and cuBLAS
// ops at once: per-thread handles and workspaces must keep them apart. The convolution is large
// enough (ResNet's 64-channel 3x3 at 56x56) that cuDNN's algorithms need a workspace, and every
// repetition is checked.
BOOST_AUTO_TEST_CASE(concurrent_streams_on_one_gpu) {
  const Tensor x = random_tensor({8, 64, 56, 56}, 1401);
  const Tensor w = random_tensor({64, 64, 3, 3}, 1402, -0.05, 0.05);
  const Tensor a = random_tensor({256, 192}, 1403);
  const Tensor b = random_tensor({192, 128}, 1404);
  const pk::Conv2dParams p{1, 1, 1, 1};
  const Tensor conv_ref = pk::conv2d_forward(x, w, Tensor(), p);
  const Tensor grad_x_ref = pk::conv2d_backward_data(conv_ref, w, x.shape(), p);
  const Tensor mm_ref = pk::matmul(a, b);
  constexpr int kReps = 8;
  // Every result stays alive until the end: the caching allocator is not stream-aware, so a
  // block freed by one stream's thread must not be handed to the other while still in use.
  std::vector<std::vector<Tensor>> conv_out(2), grad_out(2), mm_out(2);
  const Tensor xg = gpu(x), wg = gpu(w), ag = gpu(a), bg = gpu(b);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      pk::Stream stream(kGpu);
      pk::StreamGuard guard(stream);
      auto& convs = conv_out[static_cast<std::size_t>(t)];
      auto& grads = grad_out[static_cast<std::size_t>(t)];
      auto& mms = mm_out[static_cast<std::size_t>(t)];
      for (int rep = 0; rep < kReps; ++rep) {
        convs.push_back(pk::conv2d_forward(xg, wg, Tensor(), p));
        grads.push_back(pk::conv2d_backward_data(convs.back(), wg, x.shape(), p));
        mms.push_back(pk::matmul(ag, bg));
      }
      stream.synchronize();
    });
  }
  for (auto& th : threads) th.join();
  for (std::size_t t = 0; t < 2; ++t) {
    for (std::size_t rep = 0; rep < static_cast<std::size_t>(kReps); ++rep) {
      BOOST_TEST_CONTEXT("thread " << t << ", repetition " << rep) {
        check_close(conv_out[t][rep], conv_ref, kConvRtol, kConvAtol, "conv2d on a stage stream");
        check_close(grad_out[t][rep], grad_x_ref, kConvRtol, kConvAtol, "conv2d backward data on a stage stream");
        check_close(mm_out[t][rep], mm_ref, kSumRtol, kSumAtol, "matmul on a stage stream");
      }
    }
  }
}

// ---- BF16 and F16 -----------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(half_families_run_natively_on_cuda) {
  for (const DType d : kHalves) {
    BOOST_TEST_CONTEXT(pk::dtype_name(d)) {
      BOOST_CHECK(pk::runs_natively(kGpu, d, pk::HalfOp::Conv));
      BOOST_CHECK(pk::runs_natively(kGpu, d, pk::HalfOp::Matmul));
      BOOST_CHECK(pk::runs_natively(kGpu, d, pk::HalfOp::Elementwise));
      BOOST_CHECK(pk::runs_natively(kGpu, d, pk::HalfOp::Pool));
      BOOST_CHECK(pk::runs_natively(kGpu, d, pk::HalfOp::AdaptivePool));
      BOOST_CHECK(pk::runs_natively(kGpu, d, pk::HalfOp::BatchNormTrain));
      BOOST_CHECK(pk::runs_natively(kGpu, d, pk::HalfOp::BatchNormEval));
    }
  }
}

// 16-bit batch norm (own kernels) against the CPU's F32 batch norm of the same rounded values: y and
// grad_x rounded once, the F32 statistics and parameter gradients up to the order of the sums.
void check_half_batch_norm(const Shape& xs, DType d, std::uint64_t seed) {
  const std::int64_t c = xs[1];
  const auto x = rounded(xs, seed, d, -2.0, 3.0);
  const Tensor gamma = random_tensor({c}, seed + 1, 0.5, 1.5), beta = random_tensor({c}, seed + 2);
  const pk::BatchNormParams p{0.1, 1e-5};
  Tensor rm_cpu = random_tensor({c}, seed + 3), rv_cpu = random_tensor({c}, seed + 4, 0.5, 2.0);
  Tensor rm_gpu = gpu(rm_cpu), rv_gpu = gpu(rv_cpu);
  Tensor sm_cpu = Tensor::zeros({c}, DType::F32, kCpu), si_cpu = Tensor::zeros({c}, DType::F32, kCpu);
  Tensor sm_gpu = Tensor::zeros({c}, DType::F32, kGpu), si_gpu = Tensor::zeros({c}, DType::F32, kGpu);
  const std::string in = " " + pk::shape_str(xs);
  const Tensor y_ref = pk::batch_norm_forward_train(x.wide, gamma, beta, rm_cpu, rv_cpu, sm_cpu, si_cpu, p);
  Tensor rm_again = rm_gpu.clone(), rv_again = rv_gpu.clone();
  const Tensor y = pk::batch_norm_forward_train(x.half, gpu(gamma), gpu(beta), rm_gpu, rv_gpu, sm_gpu, si_gpu, p);
  check_half(y, y_ref, d, "batch_norm_forward_train y" + in);
  {   // the same bits on a second run: statistics summed in a fixed order
    Tensor sm_again = Tensor::zeros({c}, DType::F32, kGpu), si_again = Tensor::zeros({c}, DType::F32, kGpu);
    check_exact(pk::batch_norm_forward_train(x.half, gpu(gamma), gpu(beta), rm_again, rv_again, sm_again, si_again, p),
                y, "batch_norm_forward_train y, second run");
    check_exact(si_again, si_gpu, "batch_norm save_invstd, second run");
    check_exact(rv_again, rv_gpu, "batch_norm running_var, second run");
  }
  check_normalised(sm_gpu, sm_cpu, DType::F32, kMasterTol, "batch_norm save_mean" + in);
  check_normalised(si_gpu, si_cpu, DType::F32, kMasterTol, "batch_norm save_invstd" + in);
  check_normalised(rm_gpu, rm_cpu, DType::F32, kMasterTol, "batch_norm running_mean" + in);
  check_normalised(rv_gpu, rv_cpu, DType::F32, kMasterTol, "batch_norm running_var" + in);
  check_half(pk::batch_norm_forward_eval(x.half, gpu(gamma), gpu(beta), rm_gpu, rv_gpu, p),
             pk::batch_norm_forward_eval(x.wide, gamma, beta, rm_cpu, rv_cpu, p), d, "batch_norm_forward_eval" + in);

  const auto gy = rounded(xs, seed + 5, d);
  const pk::BatchNormGrads g_ref = pk::batch_norm_backward(x.wide, gy.wide, gamma, sm_cpu, si_cpu, p);
  const pk::BatchNormGrads g = pk::batch_norm_backward(x.half, gy.half, gpu(gamma), sm_gpu, si_gpu, p);
  check_half(g.grad_x, g_ref.grad_x, d, "batch_norm_backward grad_x" + in);
  check_normalised(g.grad_gamma, g_ref.grad_gamma, DType::F32, kMasterTol, "batch_norm_backward grad_gamma" + in);
  check_normalised(g.grad_beta, g_ref.grad_beta, DType::F32, kMasterTol, "batch_norm_backward grad_beta" + in);
  // Fixed launch shapes and fixed-order sums: the same bits on a second run.
  check_exact(pk::batch_norm_backward(x.half, gy.half, gpu(gamma), sm_gpu, si_gpu, p).grad_x, g.grad_x,
              "batch_norm_backward grad_x, second run");
}

BOOST_AUTO_TEST_CASE(half_batch_norm_matches_cpu_f32) {
  for (const DType d : kHalves) {
    check_half_batch_norm({4, 8, 7, 7}, d, 1801);       // a plane smaller than a block row
    check_half_batch_norm({2, 6, 20, 20}, d, 1811);
    check_half_batch_norm({3, 5, 1, 1}, d, 1821);       // one value a plane
    check_half_batch_norm({64, 12}, d, 1831);           // [N, C]
    check_half_batch_norm({32, 64, 16, 16}, d, 1841);   // training size: 8192 values a channel
    // A channel's sums split over blocks (16 K values or more a block): uneven splits of the batch
    // (3, 3 and 2 splits), loads in packs of 8, 4 and 2 elements, one image a split (4 splits), and
    // more planes than a grid's y dimension holds (66000 [N, C] planes, 2 splits).
    check_half_batch_norm({7, 3, 96, 96}, d, 1851);
    check_half_batch_norm({256, 2, 14, 14}, d, 1861);
    check_half_batch_norm({6000, 2, 2, 3}, d, 1871);
    check_half_batch_norm({4, 2, 128, 128}, d, 1881);
    check_half_batch_norm({33000, 2}, d, 1891);
  }
}

// The batched reduction gives each tensor's sum_of_squares bit for bit, empty tensors and views included.
BOOST_AUTO_TEST_CASE(sums_of_squares_match_one_at_a_time) {
  const Tensor big = gpu(random_tensor({300'007}, 1901));
  const std::vector<Tensor> ts = {gpu(random_tensor({5, 7}, 1902)), Tensor::empty({0}, DType::F32, kGpu), big,
                                  big.view(1000, {4096}), gpu(random_tensor({1000}, 1903).to(DType::BF16)),
                                  gpu(random_tensor({3, 3}, 1904).to(DType::F16))};
  const std::vector<double> batched = pk::sums_of_squares(ts);
  BOOST_REQUIRE_EQUAL(batched.size(), ts.size());
  for (std::size_t i = 0; i < ts.size(); ++i) BOOST_CHECK_EQUAL(batched[i], pk::sum_of_squares(ts[i]));
  BOOST_CHECK_EQUAL(batched[1], 0.0);
  BOOST_CHECK(pk::sums_of_squares({}).empty());
}

BOOST_AUTO_TEST_CASE(half_conv2d_matches_cpu_f32) {
  for (const DType d : kHalves) {
    check_half_conv({2, 8, 10, 10}, {6, 8, 3, 3}, {1, 1, 1, 1}, true, d, 1501);
    check_half_conv({2, 8, 10, 10}, {6, 8, 3, 3}, {2, 2, 1, 1}, false, d, 1511);
    check_half_conv({2, 3, 9, 9}, {4, 3, 3, 3}, {2, 2, 1, 1}, true, d, 1521);        // odd channel counts
    check_half_conv({4, 16, 14, 14}, {32, 16, 3, 3}, {1, 1, 1, 1}, true, d, 1531);   // tensor-core friendly
    check_half_conv({4, 16, 7, 7}, {8, 16, 1, 1}, {1, 1, 0, 0}, true, d, 1541);
  }
}

BOOST_AUTO_TEST_CASE(half_pooling_matches_cpu_f32) {
  const pk::Pool2dParams p{.kernel_h = 3, .kernel_w = 3, .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1};
  for (const DType d : kHalves) {
    const auto x = rounded({4, 8, 14, 14}, 1701, d);
    const auto mg = pk::max_pool2d_forward(x.half, p);
    const auto mc = pk::max_pool2d_forward(x.wide, p);
    check_half(mg.y, mc.y, d, "max_pool2d_forward");
    const auto gy = rounded(mc.y.shape(), 1702, d);
    check_half(pk::max_pool2d_backward(gy.half, mg.workspace, x.wide.shape(), p),
               pk::max_pool2d_backward(gy.wide, mc.workspace, x.wide.shape(), p), d, "max_pool2d_backward");
    check_half(pk::avg_pool2d_forward(x.half, p), pk::avg_pool2d_forward(x.wide, p), d, "avg_pool2d_forward");
    check_half(pk::avg_pool2d_backward(gy.half, x.wide.shape(), p), pk::avg_pool2d_backward(gy.wide, x.wide.shape(), p),
               d, "avg_pool2d_backward");
    check_half(pk::adaptive_avg_pool2d_forward(x.half, 1, 1), pk::adaptive_avg_pool2d_forward(x.wide, 1, 1), d,
               "adaptive_avg_pool2d_forward");
    const auto ga = rounded({4, 8, 3, 3}, 1703, d);
    check_half(pk::adaptive_avg_pool2d_backward(ga.half, x.wide.shape()),
               pk::adaptive_avg_pool2d_backward(ga.wide, x.wide.shape()), d, "adaptive_avg_pool2d_backward");
  }
}

BOOST_AUTO_TEST_CASE(half_linear_and_matmul_match_cpu_f32) {
  for (const DType d : kHalves) {
    check_half_linear(16, 24, 12, true, d, 1601);
    check_half_linear(17, 33, 12, false, d, 1611);   // odd dimensions
    check_half_linear(64, 96, 40, true, d, 1621);
    check_half_linear(1000, 5, 70, true, d, 1631);   // many rows for the bias column sums
    const std::int64_t m = 13, k = 29, n = 7;
    for (auto ta : {pk::Transpose::No, pk::Transpose::Yes}) {
      for (auto tb : {pk::Transpose::No, pk::Transpose::Yes}) {
        const auto a = rounded(ta == pk::Transpose::No ? Shape{m, k} : Shape{k, m}, 1641, d);
        const auto b = rounded(tb == pk::Transpose::No ? Shape{k, n} : Shape{n, k}, 1642, d);
        check_half(pk::matmul(a.half, b.half, ta, tb), pk::matmul(a.wide, b.wide, ta, tb), d, "matmul");
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(half_relu_add_and_dropout_match_cpu_f32) {
  for (const DType d : kHalves) {
    BOOST_TEST_CONTEXT(pk::dtype_name(d)) {
      const auto a = rounded({5, 7, 11}, 1701, d), b = rounded({5, 7, 11}, 1702, d);
      // ReLU copies values: exact, and equal to the CPU's F32 result rounded.
      const Tensor y = pk::relu_forward(a.half);
      BOOST_CHECK(y.dtype() == d);
      check_exact(y, pk::relu_forward(a.wide).to(d), "relu_forward");
      check_exact(pk::relu_backward(y, b.half), pk::relu_backward(pk::relu_forward(a.wide), b.wide).to(d),
                  "relu_backward");

      // One float operation rounded once: the CPU's F32 result rounded to d, bit for bit.
      const Tensor sum_ab = pk::add(a.half, b.half);
      BOOST_CHECK(sum_ab.dtype() == d);
      check_exact(sum_ab, pk::add(a.wide, b.wide).to(d), "add");
      Tensor scaled = a.half.clone(), scaled_ref = a.wide.clone();
      pk::scale_inplace(scaled, -1.75);
      pk::scale_inplace(scaled_ref, -1.75);
      check_exact(scaled, scaled_ref.to(d), "scale_inplace");
      Tensor acc = a.half.clone(), acc_ref = a.wide.clone();
      pk::add_inplace(acc, b.half, 0.3);
      pk::add_inplace(acc_ref, b.wide, 0.3);
      check_half(acc, acc_ref, d, "add_inplace alpha 0.3");

      // Sums of the same values in double, over many partial blocks: equal up to the order.
      const auto big = rounded({100'003}, 1703, d);
      BOOST_CHECK_CLOSE_FRACTION(pk::sum(big.half), pk::sum(big.wide), 1e-9);
      BOOST_CHECK_CLOSE_FRACTION(pk::sum_of_squares(big.half), pk::sum_of_squares(big.wide), 1e-9);
      BOOST_CHECK_EQUAL(pk::sum(big.half), pk::sum(big.half));   // deterministic

      for (double p : {0.0, 0.3, 0.9}) {
        const auto x = rounded({4, 3, 20, 17}, 1704, d), gy = rounded({4, 3, 20, 17}, 1705, d);
        const std::uint64_t seed = 0xBEEFull + static_cast<std::uint64_t>(p * 100);
        const pk::DropoutResult r = pk::dropout_forward(x.half, p, seed);
        const pk::DropoutResult r_ref = pk::dropout_forward(x.wide, p, seed);
        BOOST_CHECK(r.y.dtype() == d);
        check_exact(r.mask, r_ref.mask, "dropout mask");
        check_exact(r.y, r_ref.y.to(d), "dropout_forward y");
        check_exact(pk::dropout_backward(gy.half, r.mask, p), pk::dropout_backward(gy.wide, r_ref.mask, p).to(d),
                    "dropout_backward");
      }
    }
  }
}

// Training sizes (resnet18 width 32, batch 32, 32x32: reductions over 32768 elements), where an
// accumulation in plain F32 would show and the small shapes above would not.
BOOST_AUTO_TEST_CASE(training_sizes_against_f64) {
  using pw::test::random_pair;
  // Every convolution shape of resnet18 at width 32, batch 32, 32x32 inputs (cuDNN picks its
  // algorithm per shape).
  struct ConvCase {
    std::int64_t in, out, size;
    int kernel, stride;
  };
  const ConvCase convs[] = {{3, 32, 32, 3, 1},    {32, 32, 32, 3, 1},   {32, 64, 32, 3, 2},  {64, 64, 16, 3, 1},
                            {32, 64, 32, 1, 2},   {64, 128, 16, 3, 2},  {128, 128, 8, 3, 1}, {64, 128, 16, 1, 2},
                            {128, 256, 8, 3, 2},  {256, 256, 4, 3, 1},  {128, 256, 8, 1, 2}};
  std::uint64_t seed = 11;
  for (const ConvCase& k : convs) {
    const int pad = k.kernel / 2;
    const pk::Conv2dParams p{.stride_h = k.stride, .stride_w = k.stride, .pad_h = pad, .pad_w = pad};
    const auto x = random_pair({32, k.in, k.size, k.size}, seed++);
    const auto w = random_pair({k.out, k.in, k.kernel, k.kernel}, seed++, -0.1, 0.1);
    const auto gy = random_pair(pk::conv2d_output_shape(x.f32.shape(), w.f32.shape(), p), seed++);
    std::ostringstream name;
    name << "conv2d " << k.in << "->" << k.out << " " << k.kernel << "x" << k.kernel << " stride " << k.stride << " on "
         << k.size << "x" << k.size;
    check_against_f64(pk::conv2d_forward(gpu(x.f32), gpu(w.f32), Tensor(), p), pk::conv2d_forward(x.f32, w.f32, Tensor(), p),
                      pk::conv2d_forward(x.f64, w.f64, Tensor(), p), name.str() + " forward");
    check_against_f64(pk::conv2d_backward_data(gpu(gy.f32), gpu(w.f32), x.f32.shape(), p),
                      pk::conv2d_backward_data(gy.f32, w.f32, x.f32.shape(), p),
                      pk::conv2d_backward_data(gy.f64, w.f64, x.f64.shape(), p), name.str() + " grad_x");
    Tensor gw_gpu = Tensor::zeros(w.f32.shape(), DType::F32, kGpu), gw_cpu = Tensor::zeros(w.f32.shape(), DType::F32, kCpu);
    Tensor gw64 = Tensor::zeros(w.f32.shape(), DType::F64, kCpu), none_gpu, none_cpu, none64;
    pk::conv2d_backward_filter(gpu(x.f32), gpu(gy.f32), gw_gpu, none_gpu, p);
    pk::conv2d_backward_filter(x.f32, gy.f32, gw_cpu, none_cpu, p);
    pk::conv2d_backward_filter(x.f64, gy.f64, gw64, none64, p);
    check_against_f64(gw_gpu, gw_cpu, gw64, name.str() + " grad_w");
  }
  // Batch norm on layer4's shape, with a gradient that a ReLU has zeroed in half the places.
  {
    const Shape xs{32, 256, 4, 4};
    const auto x = random_pair(xs, 61, -2.0, 3.0);
    auto gy = random_pair(xs, 62, -1e-3, 1e-3);
    const auto relu_out = random_pair(xs, 63);   // the gradient passes where this is positive
    gy.f32 = pk::relu_backward(relu_out.f32, gy.f32);
    gy.f64 = gy.f32.to(DType::F64);
    const auto gamma = random_pair({256}, 64, 0.5, 1.5), beta = random_pair({256}, 65);
    const pk::BatchNormParams p{0.1, 1e-5};
    Tensor rm_g = Tensor::zeros({256}, DType::F32, kGpu), rv_g = Tensor::zeros({256}, DType::F32, kGpu);
    Tensor sm_g = Tensor::zeros({256}, DType::F32, kGpu), si_g = Tensor::zeros({256}, DType::F32, kGpu);
    Tensor rm_c = Tensor::zeros({256}, DType::F32, kCpu), rv_c = Tensor::zeros({256}, DType::F32, kCpu);
    Tensor sm_c = Tensor::zeros({256}, DType::F32, kCpu), si_c = Tensor::zeros({256}, DType::F32, kCpu);
    Tensor rm_d = Tensor::zeros({256}, DType::F64, kCpu), rv_d = Tensor::zeros({256}, DType::F64, kCpu);
    Tensor sm_d = Tensor::zeros({256}, DType::F64, kCpu), si_d = Tensor::zeros({256}, DType::F64, kCpu);
    pk::batch_norm_forward_train(gpu(x.f32), gpu(gamma.f32), gpu(beta.f32), rm_g, rv_g, sm_g, si_g, p);
    pk::batch_norm_forward_train(x.f32, gamma.f32, beta.f32, rm_c, rv_c, sm_c, si_c, p);
    pk::batch_norm_forward_train(x.f64, gamma.f64, beta.f64, rm_d, rv_d, sm_d, si_d, p);
    const auto bg = pk::batch_norm_backward(gpu(x.f32), gpu(gy.f32), gpu(gamma.f32), sm_g, si_g, p);
    const auto bc = pk::batch_norm_backward(x.f32, gy.f32, gamma.f32, sm_c, si_c, p);
    const auto bd = pk::batch_norm_backward(x.f64, gy.f64, gamma.f64, sm_d, si_d, p);
    check_against_f64(bg.grad_x, bc.grad_x, bd.grad_x, "batch_norm [32, 256, 4, 4] grad_x");
    check_against_f64(bg.grad_gamma, bc.grad_gamma, bd.grad_gamma, "batch_norm [32, 256, 4, 4] grad_gamma");
    check_against_f64(bg.grad_beta, bc.grad_beta, bd.grad_beta, "batch_norm [32, 256, 4, 4] grad_beta");
  }
  {
    const Shape xs{32, 32, 32, 32};
    const auto x = random_pair(xs, 21, -2.0, 3.0), gy = random_pair(xs, 22, -1e-3, 1e-3);
    const auto gamma = random_pair({32}, 23, 0.5, 1.5), beta = random_pair({32}, 24);
    const pk::BatchNormParams p{0.1, 1e-5};
    Tensor rm_g = Tensor::zeros({32}, DType::F32, kGpu), rv_g = Tensor::zeros({32}, DType::F32, kGpu);
    Tensor sm_g = Tensor::zeros({32}, DType::F32, kGpu), si_g = Tensor::zeros({32}, DType::F32, kGpu);
    Tensor rm_c = Tensor::zeros({32}, DType::F32, kCpu), rv_c = Tensor::zeros({32}, DType::F32, kCpu);
    Tensor sm_c = Tensor::zeros({32}, DType::F32, kCpu), si_c = Tensor::zeros({32}, DType::F32, kCpu);
    Tensor rm_d = Tensor::zeros({32}, DType::F64, kCpu), rv_d = Tensor::zeros({32}, DType::F64, kCpu);
    Tensor sm_d = Tensor::zeros({32}, DType::F64, kCpu), si_d = Tensor::zeros({32}, DType::F64, kCpu);
    check_against_f64(pk::batch_norm_forward_train(gpu(x.f32), gpu(gamma.f32), gpu(beta.f32), rm_g, rv_g, sm_g, si_g, p),
                      pk::batch_norm_forward_train(x.f32, gamma.f32, beta.f32, rm_c, rv_c, sm_c, si_c, p),
                      pk::batch_norm_forward_train(x.f64, gamma.f64, beta.f64, rm_d, rv_d, sm_d, si_d, p),
                      "batch_norm forward y");
    check_against_f64(si_g, si_c, si_d, "batch_norm save_invstd");
    // Gradients with a non-zero mean, as a loss's are: grad_beta is their sum over 32768 values.
    const auto gy_biased = random_pair(xs, 25, -0.5e-3, 1.5e-3);
    for (const auto* g : {&gy, &gy_biased}) {
      const auto bg = pk::batch_norm_backward(gpu(x.f32), gpu(g->f32), gpu(gamma.f32), sm_g, si_g, p);
      const auto bc = pk::batch_norm_backward(x.f32, g->f32, gamma.f32, sm_c, si_c, p);
      const auto bd = pk::batch_norm_backward(x.f64, g->f64, gamma.f64, sm_d, si_d, p);
      const std::string tag = g == &gy ? " (zero-mean grad_y)" : " (biased grad_y)";
      check_against_f64(bg.grad_x, bc.grad_x, bd.grad_x, "batch_norm grad_x" + tag);
      check_against_f64(bg.grad_gamma, bc.grad_gamma, bd.grad_gamma, "batch_norm grad_gamma" + tag);
      check_against_f64(bg.grad_beta, bc.grad_beta, bd.grad_beta, "batch_norm grad_beta" + tag);
    }
  }
  {
    const auto x = random_pair({32, 256}, 31), w = random_pair({10, 256}, 32, -0.1, 0.1), b = random_pair({10}, 33);
    const auto gy = random_pair({32, 10}, 34);
    check_against_f64(pk::linear_forward(gpu(x.f32), gpu(w.f32), gpu(b.f32)), pk::linear_forward(x.f32, w.f32, b.f32),
                      pk::linear_forward(x.f64, w.f64, b.f64), "linear forward");
    check_against_f64(pk::linear_backward_data(gpu(gy.f32), gpu(w.f32)), pk::linear_backward_data(gy.f32, w.f32),
                      pk::linear_backward_data(gy.f64, w.f64), "linear grad_x");
    Tensor gw_g = Tensor::zeros({10, 256}, DType::F32, kGpu), gb_g = Tensor::zeros({10}, DType::F32, kGpu);
    Tensor gw_c = Tensor::zeros({10, 256}, DType::F32, kCpu), gb_c = Tensor::zeros({10}, DType::F32, kCpu);
    Tensor gw_d = Tensor::zeros({10, 256}, DType::F64, kCpu), gb_d = Tensor::zeros({10}, DType::F64, kCpu);
    pk::linear_backward_weight(gpu(x.f32), gpu(gy.f32), gw_g, gb_g);
    pk::linear_backward_weight(x.f32, gy.f32, gw_c, gb_c);
    pk::linear_backward_weight(x.f64, gy.f64, gw_d, gb_d);
    check_against_f64(gw_g, gw_c, gw_d, "linear grad_w");
    check_against_f64(gb_g, gb_c, gb_d, "linear grad_bias");
  }
  {
    const auto x = random_pair({32, 256, 4, 4}, 41), gy = random_pair({32, 256, 1, 1}, 42);
    check_against_f64(pk::adaptive_avg_pool2d_forward(gpu(x.f32), 1, 1), pk::adaptive_avg_pool2d_forward(x.f32, 1, 1),
                      pk::adaptive_avg_pool2d_forward(x.f64, 1, 1), "adaptive_avg_pool2d forward");
    check_against_f64(pk::adaptive_avg_pool2d_backward(gpu(gy.f32), x.f32.shape()),
                      pk::adaptive_avg_pool2d_backward(gy.f32, x.f32.shape()),
                      pk::adaptive_avg_pool2d_backward(gy.f64, x.f64.shape()), "adaptive_avg_pool2d grad_x");
  }
  {
    const auto logits = random_pair({32, 10}, 51, -3.0, 3.0);
    const Tensor labels = random_ids(32, 10, 52);
    const auto rg = pk::softmax_cross_entropy_forward(gpu(logits.f32), gpu(labels));
    const auto rc = pk::softmax_cross_entropy_forward(logits.f32, labels);
    const auto rd = pk::softmax_cross_entropy_forward(logits.f64, labels);
    BOOST_TEST_MESSAGE("cross-entropy loss: cuda " << rg.loss << ", cpu " << rc.loss << ", f64 " << rd.loss);
    BOOST_CHECK_CLOSE(rg.loss, rd.loss, 1e-4);
    check_against_f64(pk::softmax_cross_entropy_backward(rg.probs, gpu(labels), 1.0 / 32),
                      pk::softmax_cross_entropy_backward(rc.probs, labels, 1.0 / 32),
                      pk::softmax_cross_entropy_backward(rd.probs, labels, 1.0 / 32), "cross-entropy grad_logits");
  }
}

BOOST_AUTO_TEST_SUITE_END()
