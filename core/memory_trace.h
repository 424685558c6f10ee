#pragma once
// Memory samples for the trace: every traced step, each rank records what its device held by kind
// at the step's end and at its peak so far; `pipewright train --trace` writes them as one counter
// track per rank beside the spans (train/trace_file.h). Recorded only for the steps the span
// recorder wants (trace::Recorder::wants), into a bounded list.
#include <array>
#include <cstdint>
#include <mutex>
#include <vector>

namespace pw::trace {

// The kinds are kernels::MemoryKind's, in its order (core knows no kernels; the allocator
// checks the count).
inline constexpr std::size_t kMemoryKindSlots = 7;

struct MemorySample {
  std::int16_t stage = -1;
  std::int16_t replica = 0;
  std::int64_t step = -1;
  std::int64_t time_ns = 0;                               // steady clock, as spans
  std::array<std::int64_t, kMemoryKindSlots> in_use{};   // held at the step's end
  std::array<std::int64_t, kMemoryKindSlots> peak{};     // held at the rank's peak so far
};

class MemoryTrace {
 public:
  explicit MemoryTrace(std::size_t capacity = std::size_t{1} << 16) : capacity_(capacity) {}
  // Kept when the global span recorder wants `sample.step`; past the capacity, counted as dropped.
  void record(const MemorySample& sample);
  std::vector<MemorySample> snapshot() const;   // in the order recorded
  std::size_t dropped() const;
  void clear();

  static MemoryTrace& global();

 private:
  std::size_t capacity_;
  mutable std::mutex mutex_;
  std::vector<MemorySample> samples_;
  std::size_t dropped_ = 0;
};

}  // namespace pw::trace
