#pragma once
// Figures the benchmarks report.
#include <algorithm>
#include <vector>

namespace pw::bench {

inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace pw::bench
