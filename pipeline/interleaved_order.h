#pragma once
// Megatron-LM's interleaved 1F1B order, shared by interleaved and interleaved-zb. Work units are
// (micro-batch, chunk) pairs taken in groups of P micro-batches: forward unit k runs chunk
// (k / P) % V of micro-batch (k / PV) * P + k % P; backward unit k the same micro-batch on the
// chunks in reverse order.
#include <algorithm>

#include "pipeline/schedule.h"

namespace pw::pipeline {

struct InterleavedUnit {
  int micro_batch;
  int chunk;
};

enum class Pass { Forward, Backward };

inline InterleavedUnit interleaved_unit(const ScheduleSpec& spec, int k, Pass pass) {
  const int p = spec.stages, v = spec.chunks;
  const int in_group = k % (p * v);
  const int chunk = in_group / p;
  return {(k / (p * v)) * p + in_group % p, pass == Pass::Forward ? chunk : v - 1 - chunk};
}

// Megatron's warm-up: the 2 (P - s - 1) units of the round trip to the last stage and back, plus
// one group of P for every chunk but the last so that the last chunk's first backward can start
// on the last stage.
inline int interleaved_warmup(const ScheduleSpec& spec, int stage) {
  return std::min(2 * (spec.stages - stage - 1) + (spec.chunks - 1) * spec.stages, spec.micro_batches * spec.chunks);
}

}  // namespace pw::pipeline
