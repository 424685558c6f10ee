#pragma once
// The replicas' gradient collectives on this host, measured rather than stated: two ranks as
// threads all-reduce over Gloo on loopback, as the replicas of a job on one host do (their CPU
// collectives resolve to Gloo there). What `pipewright plan` predicts a CPU job's gradient sync
// with, where the stated 10 GB/s and no latency made a 2-replica step look 2-3x faster than it ran.
// And what a message between two stages costs, on idle cores and on a host whose cores are all busy.
#include <cstdint>

namespace pw::train {

struct MeasuredCollective {
  double latency_s = 0.0;      // per step of a ring collective: half a one-float all-reduce of 2 ranks, back to back
  double call_s = 0.0;         // per call after work: a one-float all-reduce after work, less one back to back
  double bytes_per_s = 0.0;    // a large all-reduce's bytes over its time beyond the small one's
};

// Means of the middle half of `runs` timed all-reduces (after one to warm up): of one float back
// to back, of one float after work and of `large_bytes` after work.
// Error (with the Gloo failure) if the loopback group cannot form.
MeasuredCollective measure_cpu_allreduce(int runs = 16, std::int64_t large_bytes = std::int64_t{4} << 20);

// What a message between two stages' ranks costs on this host (the mean one way, seconds, from
// its send until its receiver has it) when `busy_threads` others keep its cores busy: a thread
// works for about a millisecond, as a stage computes, then sends a one-float tensor over the
// in-process links the embedded ranks use, and waits for the answer. With idle cores that is the
// receiver's wake-up, 25-45 us here, paid on every message a stage waits for (a step of 8
// micro-batches interleaved over 2 stages has about 30 on its critical path). With every core
// busy most take tens of microseconds, but about one in six waits for a scheduler slice (3 ms
// here): on average 0.17-0.56 ms one way, where the 4-stage pipelines on 2 cores ran 1.24x their
// processor-sharing simulation. Ranks as processes talk over sockets instead, which this does not
// measure.
double measure_stage_handoff(int busy_threads, int rounds = 200);

}  // namespace pw::train
