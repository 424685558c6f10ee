#include "models/rng.h"

#include "core/cpu_dispatch.h"

namespace pw::models {

// Computed for every row a table builds on first touch.
PW_CPU_CLONES
void keyed_uniform_row(std::uint64_t seed, std::int64_t key, int dim, double scale, float* out) {
  const std::uint64_t base = splitmix64(seed ^ splitmix64(static_cast<std::uint64_t>(key)));
  for (int j = 0; j < dim; ++j) {
    const double u = static_cast<double>(splitmix64(base + static_cast<std::uint64_t>(j)) >> 11) * 0x1.0p-53;
    out[j] = static_cast<float>((2.0 * u - 1.0) * scale);
  }
}

}  // namespace pw::models
