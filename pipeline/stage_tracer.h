#pragma once
// Trace spans of one stage's instructions. On the CPU an op's span is its host time; on a GPU,
// where ops only enqueue work, compute spans come from CUDA events on the stage's stream, turned
// into times after the step (one synchronisation per traced step).
#include <cstdint>
#include <memory>
#include <vector>

#include "core/trace.h"
#include "kernels/device.h"
#include "kernels/stream.h"

namespace pw::pipeline {

class StageTracer {
 public:
  StageTracer(kernels::Device device, int stage, int replica);
  ~StageTracer();

  void begin_step(std::int64_t step);
  bool active() const { return active_; }

  struct Token {
    std::size_t index = SIZE_MAX;   // into pending_ (GPU) or nothing
    std::int64_t start_ns = 0;
    trace::SpanKind kind = trace::SpanKind::Forward;
    int micro_batch = -1;
    int chunk = 0;
  };
  Token begin(trace::SpanKind kind, int micro_batch, int chunk);
  void end(const Token& token);
  void end_step();   // records the step span and resolves GPU events

 private:
  struct GpuSpan {
    trace::Span span;
    std::unique_ptr<kernels::Event> start, end;
  };
  bool on_gpu(trace::SpanKind kind) const { return device_.is_cuda() && trace::is_compute(kind); }

  kernels::Device device_;
  int stage_;
  int replica_;
  bool active_ = false;
  std::int64_t step_ = 0;
  std::int64_t step_start_ns_ = 0;
  std::unique_ptr<kernels::Event> base_;   // GPU: recorded at the step's start, at step_start_ns_
  std::vector<GpuSpan> pending_;
};

}  // namespace pw::pipeline
