#pragma once
// Central finite differences in double for the op gradient checks: L = sum(y * r) for a fixed
// random r, so the analytic gradient is the op's backward applied to grad_y = r.
#include <functional>

#include "kernels/tensor.h"
#include "tests/support/test_util.h"

namespace pw::test {

// sum(y * r) in double; y and r are F64 of the same shape.
inline double weighted_sum(const kernels::Tensor& y, const kernels::Tensor& r) {
  BOOST_REQUIRE_MESSAGE(y.shape() == r.shape(), "weighted_sum: " << y.describe() << " vs " << r.describe());
  const auto vy = y.to_double_vector();
  const auto vr = r.to_double_vector();
  double total = 0.0;
  for (std::size_t i = 0; i < vy.size(); ++i) total += vy[i] * vr[i];
  return total;
}

// dL/dx by central differences, perturbing each element of the F64 tensor x in place (restored
// afterwards). `loss` reads x (the same storage) and returns L.
inline kernels::Tensor numeric_gradient(kernels::Tensor& x, const std::function<double()>& loss, double h = 1e-5) {
  kernels::Tensor grad = kernels::Tensor::zeros(x.shape(), kernels::DType::F64);
  double* xs = x.data<double>();
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const double saved = xs[i];
    xs[i] = saved + h;
    const double up = loss();
    xs[i] = saved - h;
    const double down = loss();
    xs[i] = saved;
    grad.data<double>()[i] = (up - down) / (2.0 * h);
  }
  return grad;
}

// Analytic against numeric gradient: relative error ~1e-6 (absolute 1e-8 near zero).
inline void check_gradient(const kernels::Tensor& analytic, const kernels::Tensor& numeric, const std::string& what) {
  check_close(analytic, numeric, 1e-6, 1e-8, what);
}

inline kernels::Tensor random_f64(const kernels::Shape& shape, std::uint64_t seed, double lo = -1.0, double hi = 1.0) {
  return random_tensor(shape, seed, lo, hi, kernels::DType::F64);
}

// Distinct values at least `gap` apart in shuffled order: no ties or near-ties for max pooling.
inline kernels::Tensor distinct_f64(const kernels::Shape& shape, std::uint64_t seed, double gap = 0.01) {
  std::vector<double> v(static_cast<std::size_t>(kernels::shape_numel(shape)));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = (static_cast<double>(i) - 0.5 * static_cast<double>(v.size())) * gap;
  std::mt19937_64 rng(seed);
  std::shuffle(v.begin(), v.end(), rng);
  return kernels::Tensor::from_vector(v, shape);
}

}  // namespace pw::test
