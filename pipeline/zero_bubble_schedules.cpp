// ZB-H2 by list scheduling, and interleaved zero bubble by delaying W's in interleaved 1F1B.
#include "pipeline/zero_bubble_schedules.h"

#include <algorithm>
#include <deque>
#include <limits>

#include "core/error.h"
#include "pipeline/interleaved_order.h"
#include "pipeline/program_builder.h"

namespace pw::pipeline {

namespace {

constexpr int kNever = std::numeric_limits<int>::max();

// ZB-H2's stages played out with every F, Bi and W taking one unit of time. Whenever a stage is
// free it runs the first of
//   1. the Bi whose output gradient arrived earliest (the critical path back to stage 0),
//   2. its next forward, while fewer than 2P - 1 micro-batches wait for their W,
//   3. its oldest pending W (what would otherwise be bubble),
// and otherwise waits. Each stage's program is the order it ran its work in. That order comes from
// one execution in which every receive follows its send, so it cannot deadlock under any op times.
class ZeroBubbleH2Playout {
 public:
  explicit ZeroBubbleH2Playout(const ScheduleSpec& spec)
      : spec_(spec),
        max_held_(2 * spec.stages - 1),
        activation_at_(cells(spec), kNever),
        gradient_at_(cells(spec), kNever),
        lanes_(static_cast<std::size_t>(spec.stages)) {}

  void run() {
    const int total_ops = 3 * spec_.micro_batches * spec_.stages;
    int done = 0;
    for (int t = 0; done < total_ops; ++t) {
      int ran = 0;
      for (int s = 0; s < spec_.stages; ++s) ran += step(s, t) ? 1 : 0;
      done += ran;
      PW_CHECK(ran > 0 || arrives_after(t), "zb-h2 schedule: list scheduling stalled at time " << t);
    }
  }

  std::vector<Instruction> program(int stage) const {
    ProgramBuilder b(spec_, stage);
    for (const Instruction& in : lanes_[static_cast<std::size_t>(stage)].ran) {
      if (in.op == OpType::Forward) b.forward(in.micro_batch, 0);
      else if (in.op == OpType::BackwardInput) b.backward(OpType::BackwardInput, in.micro_batch, 0);
      else b.backward_weight(in.micro_batch, 0);
    }
    return std::move(b).finish();
  }

 private:
  struct Lane {
    int next_forward = 0;
    int held = 0;                        // forwarded, W not run
    std::vector<int> awaiting_backward;  // forwarded, Bi not run
    std::deque<int> pending_weights;     // Bi run, W not run
    std::vector<Instruction> ran;        // F, Bi and W in the order they ran
  };

  static std::size_t cells(const ScheduleSpec& spec) {
    return static_cast<std::size_t>(spec.stages * spec.micro_batches);
  }
  std::size_t cell(int stage, int micro_batch) const {
    return static_cast<std::size_t>(stage * spec_.micro_batches + micro_batch);
  }

  bool arrives_after(int t) const {
    auto later = [t](int at) { return at != kNever && at > t; };
    return std::any_of(activation_at_.begin(), activation_at_.end(), later) ||
           std::any_of(gradient_at_.begin(), gradient_at_.end(), later);
  }

  // Runs at most one op of `stage` in time slot t; what it sends is there at t + 1.
  bool step(int stage, int t) {
    Lane& lane = lanes_[static_cast<std::size_t>(stage)];
    auto first_gradient = lane.awaiting_backward.end();
    for (auto it = lane.awaiting_backward.begin(); it != lane.awaiting_backward.end(); ++it) {
      const int at = gradient_at_[cell(stage, *it)];
      if (at <= t && (first_gradient == lane.awaiting_backward.end() || at < gradient_at_[cell(stage, *first_gradient)]))
        first_gradient = it;
    }
    if (first_gradient != lane.awaiting_backward.end()) {
      const int m = *first_gradient;
      lane.awaiting_backward.erase(first_gradient);
      if (stage > 0) gradient_at_[cell(stage - 1, m)] = t + 1;
      lane.pending_weights.push_back(m);
      lane.ran.push_back({OpType::BackwardInput, m, 0});
      return true;
    }
    const int m = lane.next_forward;
    if (m < spec_.micro_batches && lane.held < max_held_ && (stage == 0 || activation_at_[cell(stage, m)] <= t)) {
      ++lane.next_forward;
      ++lane.held;
      // The last stage's own loss gradient is ready as soon as its forward is done.
      if (stage + 1 < spec_.stages) activation_at_[cell(stage + 1, m)] = t + 1;
      else gradient_at_[cell(stage, m)] = t + 1;
      lane.awaiting_backward.push_back(m);
      lane.ran.push_back({OpType::Forward, m, 0});
      return true;
    }
    if (!lane.pending_weights.empty()) {
      const int w = lane.pending_weights.front();
      lane.pending_weights.pop_front();
      --lane.held;
      lane.ran.push_back({OpType::BackwardWeight, w, 0});
      return true;
    }
    return false;
  }

  const ScheduleSpec& spec_;
  int max_held_;
  std::vector<int> activation_at_;   // (receiving stage, micro-batch) -> time slot it is there
  std::vector<int> gradient_at_;     // (receiving stage, micro-batch) -> time slot it is there
  std::vector<Lane> lanes_;
};

}  // namespace

std::vector<Instruction> zero_bubble_h2(const ScheduleSpec& spec, int stage) {
  ZeroBubbleH2Playout playout(spec);
  playout.run();
  return playout.program(stage);
}

// Interleaved 1F1B's order with each backward split: Bi keeps B's place, and stage s runs the W of
// its i-th backward unit after its (i + s)-th Bi, as ZB-H1 does with micro-batches. The s W's still
// pending when the backwards end fill the tail that stage s idles through in interleaved 1F1B.
std::vector<Instruction> interleaved_zero_bubble(const ScheduleSpec& spec, int stage) {
  ProgramBuilder b(spec, stage);
  const int units = spec.micro_batches * spec.chunks;
  const int warmup = interleaved_warmup(spec, stage);
  const int weight_delay = stage;
  int next_weight = 0;
  auto forward = [&](int k) {
    const InterleavedUnit u = interleaved_unit(spec, k, Pass::Forward);
    b.forward(u.micro_batch, u.chunk);
  };
  auto backward_input_then_due_weight = [&](int k) {
    const InterleavedUnit u = interleaved_unit(spec, k, Pass::Backward);
    b.backward(OpType::BackwardInput, u.micro_batch, u.chunk);
    if (k - next_weight >= weight_delay) {
      const InterleavedUnit w = interleaved_unit(spec, next_weight++, Pass::Backward);
      b.backward_weight(w.micro_batch, w.chunk);
    }
  };
  for (int k = 0; k < warmup; ++k) forward(k);
  for (int i = 0; i < units - warmup; ++i) {
    forward(warmup + i);
    backward_input_then_due_weight(i);
  }
  for (int k = units - warmup; k < units; ++k) backward_input_then_due_weight(k);
  while (next_weight < units) {
    const InterleavedUnit w = interleaved_unit(spec, next_weight++, Pass::Backward);
    b.backward_weight(w.micro_batch, w.chunk);
  }
  return std::move(b).finish();
}

}  // namespace pw::pipeline
