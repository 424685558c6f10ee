#pragma once
// Helpers shared by the test suites: random tensors, closeness checks, GPU skip, paths.
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "kernels/cuda_probe.h"
#include "kernels/stream.h"
#include "kernels/tensor.h"

namespace pw::test {

inline kernels::Tensor random_tensor(const kernels::Shape& shape, std::uint64_t seed, double lo = -1.0, double hi = 1.0,
                                     kernels::DType dtype = kernels::DType::F32,
                                     kernels::Device device = kernels::Device::cpu()) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<std::size_t>(kernels::shape_numel(shape)));
  for (auto& x : v) x = dist(rng);
  kernels::Tensor t = kernels::Tensor::from_vector(v, shape, kernels::Device::cpu());
  return t.to(dtype).to(device);
}

// Max of |a-b| / (atol + rtol*|b|) must stay <= 1.
inline void check_close(const kernels::Tensor& a, const kernels::Tensor& b, double rtol, double atol,
                        const std::string& what) {
  BOOST_REQUIRE_MESSAGE(a.shape() == b.shape(), what << ": shapes " << a.describe() << " vs " << b.describe());
  const auto va = a.to_double_vector();
  const auto vb = b.to_double_vector();
  double worst = 0.0;
  std::size_t worst_i = 0;
  for (std::size_t i = 0; i < va.size(); ++i) {
    const double diff = std::abs(va[i] - vb[i]);
    const double r = diff == 0.0 ? 0.0 : diff / (atol + rtol * std::abs(vb[i]));
    if (!(r <= worst)) {   // also catches NaN
      worst = std::isnan(r) ? 1e300 : r;
      worst_i = i;
    }
  }
  BOOST_CHECK_MESSAGE(worst <= 1.0, what << ": element " << worst_i << " differs: " << (va.empty() ? 0 : va[worst_i])
                                         << " vs " << (vb.empty() ? 0 : vb[worst_i]) << " (rtol " << rtol << ", atol "
                                         << atol << ")");
}

// The same values in both precisions: F32 random, F64 its exact widening.
struct PrecisionPair {
  kernels::Tensor f32, f64;
};

inline PrecisionPair random_pair(const kernels::Shape& shape, std::uint64_t seed, double lo = -1.0, double hi = 1.0) {
  kernels::Tensor f32 = random_tensor(shape, seed, lo, hi, kernels::DType::F32);
  return {f32, f32.to(kernels::DType::F64)};
}

inline std::string source_dir() {
  const char* d = std::getenv("PW_SOURCE_DIR");
  return d != nullptr ? d : ".";
}

inline bool has_cuda() { return kernels::probe_cuda().presence == kernels::CudaPresence::Present; }

// Global fixture for executables labelled gpu: on a machine without a GPU (no driver, or no device)
// print the skip and exit with ctest's SKIP_RETURN_CODE (77) so ctest reports "Skipped", never
// "Passed". A driver that is there but fails is not a skip: the suite fails with the CUDA error.
struct RequireCudaOrSkip {
  RequireCudaOrSkip() {
    const auto& probe = kernels::probe_cuda();
    if (probe.presence == kernels::CudaPresence::Present) return;
    if (probe.presence == kernels::CudaPresence::Broken) {
      std::printf("error: CUDA is installed but does not work: %s\n", probe.detail.c_str());
      std::fflush(stdout);
      std::_Exit(1);
    }
    std::printf("skipped: no CUDA device (%s%s%s)\n", kernels::cuda_presence_name(probe.presence),
                probe.detail.empty() ? "" : ": ", probe.detail.c_str());
    std::fflush(stdout);
    std::_Exit(77);
  }
};

}  // namespace pw::test
