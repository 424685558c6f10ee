#include "core/memory_trace.h"

#include "core/trace.h"

namespace pw::trace {

void MemoryTrace::record(const MemorySample& sample) {
  if (!Recorder::global().wants(sample.step)) return;
  std::lock_guard lock(mutex_);
  if (samples_.size() < capacity_) samples_.push_back(sample);
  else ++dropped_;
}

std::vector<MemorySample> MemoryTrace::snapshot() const {
  std::lock_guard lock(mutex_);
  return samples_;
}

std::size_t MemoryTrace::dropped() const {
  std::lock_guard lock(mutex_);
  return dropped_;
}

void MemoryTrace::clear() {
  std::lock_guard lock(mutex_);
  samples_.clear();
  dropped_ = 0;
}

MemoryTrace& MemoryTrace::global() {
  static MemoryTrace trace;
  return trace;
}

}  // namespace pw::trace
