#pragma once
// Parallel loops used by the element-wise CPU ops (and the F64 reference loops).
//
// They run on OpenMP, the runtime our oneDNN build uses, so one thread team per calling thread
// (sized by DeviceRuntime through omp_set_num_threads) does both the oneDNN primitives and these
// loops. With a second pool (oneTBB's) the OpenMP workers, which spin for a while after each
// oneDNN call, and the oneTBB workers compete for the same cores between consecutive ops.
//
// Work splits at fixed points: parallel_chunks hands each thread one contiguous range, and
// deterministic_sum adds fixed-size chunks in a fixed order, so the same input always sums in the
// same order, run after run, whatever the thread count.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <mutex>
#include <vector>

namespace pw::kernels::cpu {

inline constexpr std::int64_t kElementGrain = 16384;

// body(begin, end) over [0, n) in parallel: each thread of the calling thread's OpenMP team takes
// one contiguous range of whole `grain`-sized chunks (n <= grain runs inline). The first exception
// a body throws is rethrown here once all threads are done.
template <typename Body>
void parallel_chunks(std::int64_t n, std::int64_t grain, const Body& body) {
  if (n <= 0) return;
  grain = std::max<std::int64_t>(grain, 1);
  const std::int64_t chunks = (n + grain - 1) / grain;
  const std::int64_t threads = std::min<std::int64_t>(omp_in_parallel() ? 1 : omp_get_max_threads(), chunks);
  if (threads <= 1) {
    body(std::int64_t{0}, n);
    return;
  }
  std::exception_ptr error;
  std::mutex error_mutex;
#pragma omp parallel num_threads(static_cast<int>(threads))
  {
    const std::int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const std::int64_t first = chunks * t / nt, last = chunks * (t + 1) / nt;
    if (first < last) {
      try {
        body(first * grain, std::min(n, last * grain));
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
}

// Sum over i in [0, n) of term(i) in double, bitwise repeatable for a given n: kElementGrain-sized
// chunks (in parallel), each as eight running sums over the indices from its start (lane k takes
// every eighth from k) added in lane order and then its tail, then the chunk sums in chunk order.
template <typename Term>
double deterministic_sum(std::int64_t n, const Term& term) {
  if (n <= 0) return 0.0;
  const std::int64_t chunks = (n + kElementGrain - 1) / kElementGrain;
  std::vector<double> partial(static_cast<std::size_t>(chunks), 0.0);
  parallel_chunks(chunks, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t c = begin; c < end; ++c) {
      // Eight running sums, added together in a fixed order at the end: one sum is a chain of
      // dependent adds (a 2 MiB gradient took 0.7 ms); eight independent ones vectorise.
      constexpr int kLanes = 8;
      double lanes[kLanes] = {};
      const std::int64_t last = std::min(n, (c + 1) * kElementGrain);
      std::int64_t i = c * kElementGrain;
      for (; i + kLanes <= last; i += kLanes)
        for (int k = 0; k < kLanes; ++k) lanes[k] += term(i + k);
      double acc = 0.0;
      for (const double lane : lanes) acc += lane;
      for (; i < last; ++i) acc += term(i);
      partial[static_cast<std::size_t>(c)] = acc;
    }
  });
  double total = 0.0;
  for (const double p : partial) total += p;
  return total;
}

}  // namespace pw::kernels::cpu
