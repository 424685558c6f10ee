#include "pipeline/v_schedules.h"

#include <deque>
#include <utility>

#include "core/error.h"
#include "pipeline/program_builder.h"
#include "pipeline/v_building_block.h"

namespace pw::pipeline {

int v_activation_limit(ScheduleKind kind, int stages) {
  switch (kind) {
    case ScheduleKind::ZeroBubbleV: return 2 * stages;
    case ScheduleKind::VHalf:
    case ScheduleKind::VMin: return building_block_activation_limit(kind, stages);
    default: PW_FAIL("no activation limit for the " << schedule_kind_name(kind) << " schedule");
  }
}

int v_min_micro_batches(ScheduleKind kind, int stages) {
  return kind == ScheduleKind::DualPipeV ? 2 * stages : stages;
}

std::vector<Instruction> memory_limited_v(const ScheduleSpec& spec, int stage) {
  const auto orders = building_block_v_orders(spec);
  ProgramBuilder b(spec, stage);
  for (const BlockOp& op : orders[static_cast<std::size_t>(stage)]) {
    switch (op.op) {
      case OpType::Forward: b.forward(op.micro_batch, op.chunk); break;
      case OpType::BackwardInput: b.backward(OpType::BackwardInput, op.micro_batch, op.chunk); break;
      default: b.backward_weight(op.micro_batch, op.chunk); break;
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
  // As DeepSeek's dualpipev.py: the second half of these backwards split, on an even stage from the
  // chunk-0 backward of pair (s+1)/2 on, on an odd one from the chunk-1 backward of that pair.
  for (int i = 0; i <= s; ++i) {
    const int half = (s + 1) / 2;
    const bool split1 = i > half || (i == half && s % 2 == 1), split0 = i >= half;
    if (split1) backward_input(1); else backward(1);
    if (split0) backward_input(0); else backward(0);
  }
  for (int i = 0; i < below; ++i) {
    if (!weights.empty()) weight();
    backward_input(0);
  }
  while (!weights.empty()) weight();
  return std::move(b).finish();
}

}  // namespace pw::pipeline
