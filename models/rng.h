#pragma once
// Deterministic random numbers for initialisation: the same values on every platform and build,
// and one independent stream per parameter name, so a stage that builds only its own layers
// draws the same weights as the whole model would.
#include <cmath>
#include <cstdint>
#include <string_view>

namespace pw::models {

inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

inline std::uint64_t hash_name(std::uint64_t seed, std::string_view name) {
  std::uint64_t h = splitmix64(seed);
  for (unsigned char c : name) h = splitmix64(h ^ c);
  return h;
}

// Row `key` of an embedding table: uniform in [-scale, scale), each value a function of (seed,
// key, j) alone, so a local table and one sharded elsewhere (rows created on first
// touch, in any order) start from the same rows.
void keyed_uniform_row(std::uint64_t seed, std::int64_t key, int dim, double scale, float* out);  // rng.cpp

class Rng {
 public:
  explicit Rng(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next_u64() { return state_ = splitmix64(state_); }
  double uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }   // [0, 1)
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  double normal() {   // Box-Muller
    const double u1 = 1.0 - uniform();
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }

 private:
  std::uint64_t state_;
};

}  // namespace pw::models
