#pragma once
// The dropout keep rule of kernels/ops/dropout.h as one function both backends call, so a seed
// gives the same mask on CPU and CUDA.
#include <cstdint>

#if defined(__CUDACC__)
#define PW_HOST_DEVICE __host__ __device__
#else
#define PW_HOST_DEVICE
#endif

namespace pw::kernels {

PW_HOST_DEVICE inline std::uint64_t splitmix64(std::uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// True when element `index` survives dropout with drop probability p.
PW_HOST_DEVICE inline bool dropout_keeps(std::uint64_t seed, std::uint64_t index, double p) {
  const std::uint64_t h = splitmix64(seed ^ (index * 0x9E3779B97F4A7C15ull));
  const double u = static_cast<double>(h >> 11) * 0x1.0p-53;
  return u >= p;
}

// Factor applied to kept elements: T(1 / (1 - p)), and 0 when everything is dropped.
PW_HOST_DEVICE inline double dropout_scale(double p) { return p < 1.0 ? 1.0 / (1.0 - p) : 0.0; }

}  // namespace pw::kernels
