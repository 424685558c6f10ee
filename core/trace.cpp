#include "core/trace.h"

#include "core/error.h"

namespace pw::trace {

const char* span_kind_name(SpanKind kind) {
  switch (kind) {
    case SpanKind::Step: return "step";
    case SpanKind::Forward: return "forward";
    case SpanKind::Backward: return "backward";
    case SpanKind::BackwardInput: return "backward-input";
    case SpanKind::BackwardWeight: return "backward-weight";
    case SpanKind::Recompute: return "recompute";
    case SpanKind::OptimizerStep: return "optimizer";
    case SpanKind::Send: return "send";
    case SpanKind::RecvWait: return "recv-wait";
    case SpanKind::Transfer: return "transfer";
    case SpanKind::AllReduce: return "all-reduce";
    case SpanKind::DataLoad: return "data";
    case SpanKind::PsPull: return "ps-pull";
    case SpanKind::PsPush: return "ps-push";
    case SpanKind::AllGather: return "all-gather";
  }
  return "?";
}

bool is_compute(SpanKind kind) {
  switch (kind) {
    case SpanKind::Forward:
    case SpanKind::Backward:
    case SpanKind::BackwardInput:
    case SpanKind::BackwardWeight:
    case SpanKind::Recompute:
    case SpanKind::OptimizerStep: return true;
    default: return false;
  }
}

bool is_communication(SpanKind kind) {
  return kind == SpanKind::Send || kind == SpanKind::Transfer || kind == SpanKind::AllReduce ||
         kind == SpanKind::AllGather;
}

Recorder::Recorder(std::size_t capacity) : ring_(capacity) {
  PW_CHECK(capacity > 0, "a trace ring needs room for at least one span");
}

void Recorder::enable(std::int64_t first_step, std::int64_t last_step) {
  first_step_.store(first_step);
  last_step_.store(last_step);
  enabled_.store(true);
}

void Recorder::disable() { enabled_.store(false); }

void Recorder::record(const Span& span) {
  if (!wants(span.step)) return;
  std::lock_guard lock(mutex_);
  ring_[next_] = span;
  next_ = (next_ + 1) % ring_.size();
  if (stored_ < ring_.size()) ++stored_;
  else ++dropped_;
}

std::vector<Span> Recorder::snapshot() const {
  std::lock_guard lock(mutex_);
  std::vector<Span> out;
  out.reserve(stored_);
  const std::size_t first = stored_ < ring_.size() ? 0 : next_;
  for (std::size_t i = 0; i < stored_; ++i) out.push_back(ring_[(first + i) % ring_.size()]);
  return out;
}

std::size_t Recorder::dropped() const {
  std::lock_guard lock(mutex_);
  return dropped_;
}

void Recorder::clear() {
  std::lock_guard lock(mutex_);
  next_ = stored_ = dropped_ = 0;
}

Recorder& Recorder::global() {
  static Recorder recorder;
  return recorder;
}

ScopedSpan::ScopedSpan(SpanKind kind, int stage, int replica, std::int64_t step, int micro_batch, int chunk, int lane)
    : active_(Recorder::global().wants(step)) {
  if (!active_) return;
  span_.kind = kind;
  span_.stage = static_cast<std::int16_t>(stage);
  span_.replica = static_cast<std::int16_t>(replica);
  span_.lane = static_cast<std::int8_t>(lane);
  span_.chunk = static_cast<std::int16_t>(chunk);
  span_.micro_batch = micro_batch;
  span_.step = step;
  span_.start_ns = now_ns();
}

ScopedSpan::~ScopedSpan() {
  if (!active_) return;
  span_.end_ns = now_ns();
  Recorder::global().record(span_);
}

}  // namespace pw::trace
