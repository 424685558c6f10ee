#include "pipeline/stage_tracer.h"

namespace pw::pipeline {

StageTracer::StageTracer(kernels::Device device, int stage, int replica)
    : device_(device), stage_(stage), replica_(replica) {}

StageTracer::~StageTracer() = default;

void StageTracer::begin_step(std::int64_t step) {
  step_ = step;
  active_ = trace::Recorder::global().wants(step);
  pending_.clear();
  if (!active_) return;
  if (device_.is_cuda()) {
    // The base event marks "now" on the stream: wait for earlier work so both clocks agree.
    auto& stream = kernels::current_stream(device_);
    stream.synchronize();
    base_ = std::make_unique<kernels::Event>(device_);
    base_->record(stream);
    base_->synchronize();
  }
  step_start_ns_ = trace::now_ns();
}

StageTracer::Token StageTracer::begin(trace::SpanKind kind, int micro_batch, int chunk) {
  Token t;
  if (!active_) return t;
  t.kind = kind;
  t.micro_batch = micro_batch;
  t.chunk = chunk;
  if (on_gpu(kind)) {
    GpuSpan g;
    g.start = std::make_unique<kernels::Event>(device_);
    g.start->record(kernels::current_stream(device_));
    pending_.push_back(std::move(g));
    t.index = pending_.size() - 1;
  } else {
    t.start_ns = trace::now_ns();
  }
  return t;
}

void StageTracer::end(const Token& t) {
  if (!active_) return;
  trace::Span s;
  s.kind = t.kind;
  s.stage = static_cast<std::int16_t>(stage_);
  s.replica = static_cast<std::int16_t>(replica_);
  s.chunk = static_cast<std::int16_t>(t.chunk);
  s.micro_batch = t.micro_batch;
  s.step = step_;
  if (t.index != SIZE_MAX) {
    auto& g = pending_[t.index];
    g.end = std::make_unique<kernels::Event>(device_);
    g.end->record(kernels::current_stream(device_));
    g.span = s;
    return;
  }
  s.start_ns = t.start_ns;
  s.end_ns = trace::now_ns();
  trace::Recorder::global().record(s);
}

void StageTracer::end_step() {
  if (!active_) return;
  if (!pending_.empty()) {
    kernels::current_stream(device_).synchronize();
    for (auto& g : pending_) {
      if (!g.end) continue;
      g.span.start_ns = step_start_ns_ + static_cast<std::int64_t>(kernels::Event::elapsed_ms(*base_, *g.start) * 1e6);
      g.span.end_ns = step_start_ns_ + static_cast<std::int64_t>(kernels::Event::elapsed_ms(*base_, *g.end) * 1e6);
      trace::Recorder::global().record(g.span);
    }
    pending_.clear();
  }
  trace::Span step;
  step.kind = trace::SpanKind::Step;
  step.stage = static_cast<std::int16_t>(stage_);
  step.replica = static_cast<std::int16_t>(replica_);
  step.step = step_;
  step.start_ns = step_start_ns_;
  step.end_ns = trace::now_ns();
  trace::Recorder::global().record(step);
  active_ = false;
}

}  // namespace pw::pipeline
