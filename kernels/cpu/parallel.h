#pragma once
// oneTBB loops used by the element-wise CPU ops. Reductions split at fixed points (simple
// partitioner, fixed grain) so the same input always sums in the same order, run after run.
#include <cstdint>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_reduce.h>

namespace pw::kernels::cpu {

inline constexpr std::int64_t kElementGrain = 16384;

// body(begin, end) over [0, n) in parallel chunks.
template <typename Body>
void parallel_chunks(std::int64_t n, std::int64_t grain, const Body& body) {
  if (n <= 0) return;
  if (n <= grain) {
    body(std::int64_t{0}, n);
    return;
  }
  tbb::parallel_for(tbb::blocked_range<std::int64_t>(0, n, grain),
                    [&](const tbb::blocked_range<std::int64_t>& r) { body(r.begin(), r.end()); });
}

// Sum over i in [0, n) of term(i) in double, bitwise repeatable for a given n.
template <typename Term>
double deterministic_sum(std::int64_t n, const Term& term) {
  if (n <= 0) return 0.0;
  return tbb::parallel_deterministic_reduce(
      tbb::blocked_range<std::int64_t>(0, n, kElementGrain), 0.0,
      [&](const tbb::blocked_range<std::int64_t>& r, double acc) {
        for (std::int64_t i = r.begin(); i < r.end(); ++i) acc += term(i);
        return acc;
      },
      [](double a, double b) { return a + b; });
}

}  // namespace pw::kernels::cpu
