#pragma once
// The trace recorder: every rank records spans (forward, backward, recompute, send, receive-wait,
// transfer, all-reduce, optimizer step, data loading) into a bounded ring buffer; `pipewright
// train --trace` writes them as a Chrome trace and `pipewright prof` reads them back. Recording
// is off unless enabled, and then costs one short critical section per span.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <vector>

namespace pw::trace {

enum class SpanKind : std::uint8_t {
  Step,             // a stage's whole step (the window the others sit in)
  Forward,
  Backward,
  BackwardInput,
  BackwardWeight,
  Recompute,
  OptimizerStep,
  Send,
  RecvWait,         // waiting for a neighbour's activation or gradient to arrive
  Transfer,         // copying a received tensor onto the stage's device
  AllReduce,        // gradient all-reduce (the reducer's thread) or waiting for it (ReduceGrads)
  DataLoad,
  PsPull,           // embedding rows from the parameter servers (recorded by the process, stage -1)
  PsPush,           // a step's embedding gradients to the parameter servers
  AllGather,        // sharded optimizer state: a bucket's updated weights (the reducer's thread)
};
inline constexpr int kSpanKinds = static_cast<int>(SpanKind::AllGather) + 1;

const char* span_kind_name(SpanKind kind);   // "forward", "recv-wait", ...
bool is_compute(SpanKind kind);              // forward, backward (both halves), recompute, optimizer step
bool is_communication(SpanKind kind);        // send, transfer, all-reduce

// Where a span ran: the stage and replica of the rank (-1: the process itself, e.g. data
// loading) and the lane (0: the stage's compute stream, 1: its all-reduce thread).
struct Span {
  SpanKind kind = SpanKind::Forward;
  std::int16_t stage = -1;
  std::int16_t replica = 0;
  std::int8_t lane = 0;
  std::int16_t chunk = 0;
  std::int32_t micro_batch = -1;
  std::int64_t step = -1;
  std::int64_t start_ns = 0;   // steady clock
  std::int64_t end_ns = 0;
};

inline std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

class Recorder {
 public:
  explicit Recorder(std::size_t capacity = std::size_t{1} << 18);

  // Records steps first <= step < last (spans of other steps are dropped at once).
  void enable(std::int64_t first_step = 0, std::int64_t last_step = INT64_MAX);
  void disable();
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  bool wants(std::int64_t step) const {
    return enabled() && step >= first_step_.load(std::memory_order_relaxed) &&
           step < last_step_.load(std::memory_order_relaxed);
  }
  void record(const Span& span);
  // The spans held, oldest first; when more were recorded than fit, the oldest were dropped.
  std::vector<Span> snapshot() const;
  std::size_t dropped() const;
  void clear();

  static Recorder& global();

 private:
  std::atomic<bool> enabled_{false};
  std::atomic<std::int64_t> first_step_{0};
  std::atomic<std::int64_t> last_step_{INT64_MAX};
  mutable std::mutex mutex_;
  std::vector<Span> ring_;
  std::size_t next_ = 0;     // where the next span goes
  std::size_t stored_ = 0;   // how many the ring holds
  std::size_t dropped_ = 0;
};

// Records [construction, destruction) as one span of the global recorder when its step is traced.
class ScopedSpan {
 public:
  ScopedSpan(SpanKind kind, int stage, int replica, std::int64_t step, int micro_batch = -1, int chunk = 0,
             int lane = 0);
  ~ScopedSpan();
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;

 private:
  bool active_;
  Span span_;
};

}  // namespace pw::trace
