#include "pipeline/v_schedules.h"

#include <algorithm>
#include <climits>
#include <deque>
#include <optional>
#include <utility>

#include "core/error.h"
#include "pipeline/program_builder.h"

namespace pw::pipeline {

namespace {

struct Step {
  OpType op;   // Forward, BackwardInput or BackwardWeight
  int micro_batch;
  int chunk;
};

constexpr int kNotYet = INT_MAX;

// One stage's part of the list scheduler.
struct StagePlan {
  int next_forward[2] = {0, 0};
  int next_backward[2] = {0, 0};
  int held = 0;                                  // chunk activations held (forward done, W not yet)
  std::deque<std::pair<int, int>> weights;       // (micro_batch, chunk) with Bi done, W pending
  std::vector<Step> steps;
};

// Every stage's op order for a memory-limited V kind (see v_schedules.h).
std::vector<std::vector<Step>> plan_memory_limited(const ScheduleSpec& spec) {
  const int p = spec.stages, m_total = spec.micro_batches, last = 2 * p - 1;
  const int limit = v_activation_limit(spec.kind, p);
  // activation[v][m]: when piece v's input of micro-batch m is there; gradient[v][m]: its output gradient.
  std::vector<std::vector<int>> activation(static_cast<std::size_t>(2 * p), std::vector<int>(m_total, kNotYet));
  auto gradient = activation;
  for (int m = 0; m < m_total; ++m) activation[0][m] = 0;
  std::vector<StagePlan> plans(static_cast<std::size_t>(p));
  const std::size_t ops_per_stage = static_cast<std::size_t>(6 * m_total);
  auto piece = [&](int stage, int chunk) { return chunk == 0 ? stage : last - stage; };
  for (int t = 0;; ++t) {
    bool finished = true, progressed = false;
    for (int s = 0; s < p; ++s) {
      StagePlan& st = plans[static_cast<std::size_t>(s)];
      if (st.steps.size() == ops_per_stage) continue;
      finished = false;
      std::optional<Step> chosen;
      for (int c : {1, 0}) {
        const int m = st.next_backward[c];
        if (chosen || m >= st.next_forward[c] || gradient[piece(s, c)][m] > t) continue;
        chosen = Step{OpType::BackwardInput, m, c};
      }
      for (int c : {1, 0}) {
        const int m = st.next_forward[c];
        // A chunk-0 forward leaves one place free, so that the chunk-1 forward of a micro-batch
        // already in the stage can always run.
        const int room_needed = c == 0 ? 2 : 1;
        if (chosen || m >= m_total || activation[piece(s, c)][m] > t || st.held + room_needed > limit) continue;
        chosen = Step{OpType::Forward, m, c};
      }
      if (!chosen && !st.weights.empty()) {
        chosen = Step{OpType::BackwardWeight, st.weights.front().first, st.weights.front().second};
        st.weights.pop_front();
      }
      if (!chosen) continue;
      progressed = true;
      const Step& step = *chosen;
      const int v = piece(s, step.chunk);
      switch (step.op) {
        case OpType::Forward:
          ++st.next_forward[step.chunk];
          ++st.held;
          (v == last ? gradient[v] : activation[v + 1])[step.micro_batch] = t + 1;
          break;
        case OpType::BackwardInput:
          ++st.next_backward[step.chunk];
          st.weights.emplace_back(step.micro_batch, step.chunk);
          if (v > 0) gradient[v - 1][step.micro_batch] = t + 1;
          break;
        default: --st.held; break;
      }
      st.steps.push_back(step);
    }
    if (finished) break;
    // With unit times nothing changes after a step where no stage could start anything.
    PW_CHECK(progressed, schedule_kind_name(spec.kind) << " schedule: the list scheduler stalls at time " << t
                                                        << " (" << p << " stages, " << m_total << " micro-batches)");
  }
  std::vector<std::vector<Step>> out;
  for (StagePlan& st : plans) out.push_back(std::move(st.steps));
  return out;
}

}  // namespace

int v_activation_limit(ScheduleKind kind, int stages) {
  switch (kind) {
    case ScheduleKind::ZeroBubbleV: return 2 * stages;
    case ScheduleKind::VHalf: return std::max(2, stages + 1);
    case ScheduleKind::VMin: return std::max(2, (2 * stages + 2) / 3 + 1);
    default: PW_FAIL("no activation limit for the " << schedule_kind_name(kind) << " schedule");
  }
}

int v_min_micro_batches(ScheduleKind kind, int stages) {
  return kind == ScheduleKind::DualPipeV ? 2 * stages : stages;
}

std::vector<Instruction> memory_limited_v(const ScheduleSpec& spec, int stage) {
  const auto plans = plan_memory_limited(spec);
  ProgramBuilder b(spec, stage);
  for (const Step& step : plans[static_cast<std::size_t>(stage)]) {
    switch (step.op) {
      case OpType::Forward: b.forward(step.micro_batch, step.chunk); break;
      case OpType::BackwardInput: b.backward(OpType::BackwardInput, step.micro_batch, step.chunk); break;
      default: b.backward_weight(step.micro_batch, step.chunk); break;
    }
  }
  return std::move(b).finish();
}

std::vector<Instruction> zero_bubble_v(const ScheduleSpec& spec, int stage) {
  const int p = spec.stages, s = stage, m_total = spec.micro_batches;
  ProgramBuilder b(spec, stage);
  int next_forward[2] = {0, 0}, next_backward[2] = {0, 0}, next_weight[2] = {0, 0};
  auto forward = [&](int c) {
    if (next_forward[c] < m_total) b.forward(next_forward[c]++, c);
  };
  auto backward_input = [&](int c) { b.backward(OpType::BackwardInput, next_backward[c]++, c); };
  auto weight = [&](int c) { b.backward_weight(next_weight[c]++, c); };
  // Warm-up: chunk-0 forwards until micro-batch 0 comes back up to this stage's chunk 1 (2(P-s)-1
  // of them), then alternate chunks while the first gradients travel, then chunk 1's first
  // backwards with their weight halves right after.
  for (int i = 0; i < 2 * (p - s) - 1; ++i) forward(0);
  for (int i = 0; i < s; ++i) {
    forward(1);
    forward(0);
  }
  for (int i = 0; i < p - s; ++i) {
    forward(1);
    backward_input(1);
    weight(1);
  }
  // Steady state: F0 Bi0 W0 F1 Bi1 W1; a stage holds 2P chunk activations at most, 1F1B's P.
  while (next_forward[1] < m_total) {
    forward(0);
    backward_input(0);
    weight(0);
    forward(1);
    backward_input(1);
    weight(1);
  }
  // Cool-down: the last input halves first, their weight halves fill the wait for gradients.
  for (int i = 0; i < s; ++i) {
    backward_input(0);
    backward_input(1);
  }
  for (int i = 0; i < p - s; ++i) {
    backward_input(0);
    weight(0);
  }
  while (next_weight[1] < m_total) weight(1);
  while (next_weight[0] < m_total) weight(0);
  return std::move(b).finish();
}

std::vector<Instruction> dual_pipe_v(const ScheduleSpec& spec, int stage) {
  const int p = spec.stages, s = stage;
  ProgramBuilder b(spec, stage);
  int next_forward[2] = {0, 0}, next_backward[2] = {0, 0};
  std::deque<std::pair<int, int>> weights;   // split backwards whose W is still to run, oldest first
  auto forward = [&](int c) { b.forward(next_forward[c]++, c); };
  auto backward = [&](int c) { b.backward(OpType::Backward, next_backward[c]++, c); };
  auto backward_input = [&](int c) {
    weights.emplace_back(next_backward[c], c);
    b.backward(OpType::BackwardInput, next_backward[c]++, c);
  };
  auto weight = [&] {
    b.backward_weight(weights.front().first, weights.front().second);
    weights.pop_front();
  };
  auto overlapped = [&](int forward_chunk, int backward_chunk) {
    b.forward_backward(next_forward[forward_chunk]++, forward_chunk, OpType::Backward,
                       next_backward[backward_chunk]++, backward_chunk);
  };
  const int below = p - s - 1;   // stages after this one on the way down
  // Warm-up: chunk-0 forwards until micro-batch 0 comes back up to chunk 1, then forward pairs.
  for (int i = 0; i < 2 * below; ++i) forward(0);
  for (int i = 0; i <= s; ++i) {
    forward(0);
    forward(1);
  }
  // Chunk 1's first backwards, split so that their weight halves fill the wait for the next forward.
  for (int i = 0; i < below; ++i) {
    backward_input(1);
    weight();
    forward(1);
  }
  // Steady state: F0&B1, F1&B0. The last stage runs its first F0 and B1 apart: the turn makes F0's
  // output the next chunk-1 forward's input on the same stage.
  const int steady = spec.micro_batches - 2 * p + s + 1;
  for (int i = 0; i < steady; ++i) {
    if (i == 0 && s == p - 1) {
      forward(0);
      backward(1);
    } else {
      overlapped(0, 1);
    }
    overlapped(1, 0);
  }
  // Drain: chunk 1's last backwards with the last chunk-1 forwards, then split backwards whose
  // weight halves fill the tail while gradients travel back to stage 0.
  for (int i = 0; i < below; ++i) {
    backward(1);
    overlapped(1, 0);
  }
  for (int i = 0; i <= s; ++i) {
    const bool split = 2 * i >= s + 1;
    if (split) backward_input(1); else backward(1);
    if (split) backward_input(0); else backward(0);
  }
  for (int i = 0; i < below; ++i) {
    if (!weights.empty()) weight();
    backward_input(0);
  }
  while (!weights.empty()) weight();
  return std::move(b).finish();
}

}  // namespace pw::pipeline
