#pragma once
// The replicas' gradient collectives on this host, measured rather than stated: two ranks as
// threads all-reduce over Gloo on loopback, as the replicas of a job on one host do (their CPU
// collectives resolve to Gloo there). What `pipewright plan` predicts a CPU job's gradient sync
// with, where the stated 10 GB/s and no latency made a 2-replica step look 2-3x faster than it ran.
#include <cstdint>

namespace pw::train {

struct MeasuredCollective {
  double latency_s = 0.0;      // per step of a ring collective: half a one-float all-reduce of 2 ranks
  double bytes_per_s = 0.0;    // a large all-reduce's bytes over its time beyond the latency
};

// Medians of `runs` timed all-reduces (after one to warm up) of one float and of `large_bytes`.
// Error (with the Gloo failure) if the loopback group cannot form.
MeasuredCollective measure_cpu_allreduce(int runs = 7, std::int64_t large_bytes = std::int64_t{4} << 20);

}  // namespace pw::train
