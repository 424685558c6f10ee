#include "dataparallel/ps/replica_rows_norm.h"

#include <cstdint>
#include <unordered_map>

#include "core/error.h"

namespace pw::dp {

double sum_of_squares_over_replicas(const std::vector<std::vector<PendingRows>>& all) {
  if (all.empty()) return 0.0;
  const std::size_t layers = all.front().size();
  for (const auto& replica : all)
    PW_CHECK(replica.size() == layers, "replicas report " << replica.size() << " and " << layers
                                                          << " server-backed layers for one stage");
  double total = 0.0;
  for (std::size_t l = 0; l < layers; ++l) {
    std::size_t width = 0;
    std::unordered_map<std::int64_t, std::size_t> slot;   // key -> its row in `sum`
    std::vector<double> sum;
    for (const auto& replica : all) {
      const PendingRows& p = replica[l];
      if (p.keys.empty()) continue;
      const std::size_t w = p.rows.size() / p.keys.size();
      PW_CHECK(w > 0 && p.rows.size() == p.keys.size() * w && (width == 0 || w == width),
               "layer " << l << ": " << p.keys.size() << " keys with " << p.rows.size()
                        << " gradient values; rows of " << width << " values elsewhere");
      width = w;
      for (std::size_t k = 0; k < p.keys.size(); ++k) {
        const auto [at, added] = slot.try_emplace(p.keys[k], sum.size() / width);
        if (added) sum.resize(sum.size() + width, 0.0);
        double* row = sum.data() + at->second * width;
        const float* g = p.rows.data() + k * width;
        for (std::size_t j = 0; j < width; ++j) row[j] += static_cast<double>(g[j]);
      }
    }
    for (double v : sum) total += v * v;
  }
  return total;
}

}  // namespace pw::dp
