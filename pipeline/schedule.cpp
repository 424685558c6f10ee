// Schedule kinds, their validation, and the per-stage instruction lists of GPipe, 1F1B,
// interleaved 1F1B and ZB-H1 (the V-placed kinds': v_schedules.cpp).
#include "pipeline/schedule.h"

#include <algorithm>
#include <map>
#include <utility>

#include "core/error.h"
#include "pipeline/interleaved_order.h"
#include "pipeline/program_builder.h"
#include "pipeline/v_schedules.h"
#include "pipeline/zero_bubble_schedules.h"

namespace pw::pipeline {

namespace {


bool needs_at_least_one_micro_batch_per_stage(ScheduleKind kind) { return kind != ScheduleKind::GPipe; }

// Fill-drain: every forward, then every backward in micro-batch order.
std::vector<Instruction> gpipe(const ScheduleSpec& spec, int stage) {
  ProgramBuilder b(spec, stage);
  for (int m = 0; m < spec.micro_batches; ++m) b.forward(m, 0);
  for (int m = 0; m < spec.micro_batches; ++m) b.backward(OpType::Backward, m, 0);
  return std::move(b).finish();
}

// Forwards a stage runs before its first backward in 1F1B and ZB-H1: just enough that the last
// stage's first backward finds every earlier stage busy.
int warmup_forwards(const ScheduleSpec& spec, int stage) {
  return std::min(spec.stages - stage - 1, spec.micro_batches);
}

// PipeDream-Flush: warm-up forwards, steady one-forward-one-backward, cool-down backwards.
std::vector<Instruction> one_f_one_b(const ScheduleSpec& spec, int stage) {
  ProgramBuilder b(spec, stage);
  const int m_total = spec.micro_batches;
  const int warmup = warmup_forwards(spec, stage);
  for (int m = 0; m < warmup; ++m) b.forward(m, 0);
  for (int i = 0; i < m_total - warmup; ++i) {
    b.forward(warmup + i, 0);
    b.backward(OpType::Backward, i, 0);
  }
  for (int m = m_total - warmup; m < m_total; ++m) b.backward(OpType::Backward, m, 0);
  return std::move(b).finish();
}

// ZB-H1: 1F1B with the backward split. The input half (Bi) keeps 1F1B's place on the critical
// path; stage s runs its weight half (W) s micro-batches late, so every stage holds at most P
// micro-batches (stage 0's 1F1B peak, hence the same peak memory) and the s W's still pending at
// the end fill the tail bubble that stage s has in 1F1B while gradients travel back to stage 0.
std::vector<Instruction> zero_bubble_h1(const ScheduleSpec& spec, int stage) {
  ProgramBuilder b(spec, stage);
  const int m_total = spec.micro_batches;
  const int warmup = warmup_forwards(spec, stage);
  const int weight_delay = stage;
  int next_weight = 0;
  for (int m = 0; m < warmup; ++m) b.forward(m, 0);
  for (int i = 0; i < m_total - warmup; ++i) {
    b.forward(warmup + i, 0);
    b.backward(OpType::BackwardInput, i, 0);
    if (i - next_weight >= weight_delay) b.backward_weight(next_weight++, 0);
  }
  for (int m = m_total - warmup; m < m_total; ++m) {
    b.backward(OpType::BackwardInput, m, 0);
    b.backward_weight(next_weight++, 0);
  }
  while (next_weight < m_total) b.backward_weight(next_weight++, 0);
  return std::move(b).finish();
}

// Megatron-LM's interleaved 1F1B (pipeline/interleaved_order.h).
std::vector<Instruction> interleaved(const ScheduleSpec& spec, int stage) {
  ProgramBuilder b(spec, stage);
  const int units = spec.micro_batches * spec.chunks;
  const int warmup = interleaved_warmup(spec, stage);
  auto forward = [&](int k) {
    const InterleavedUnit u = interleaved_unit(spec, k, Pass::Forward);
    b.forward(u.micro_batch, u.chunk);
  };
  auto backward = [&](int k) {
    const InterleavedUnit u = interleaved_unit(spec, k, Pass::Backward);
    b.backward(OpType::Backward, u.micro_batch, u.chunk);
  };
  for (int k = 0; k < warmup; ++k) forward(k);
  for (int i = 0; i < units - warmup; ++i) {
    forward(warmup + i);
    backward(i);
  }
  for (int k = units - warmup; k < units; ++k) backward(k);
  return std::move(b).finish();
}

}  // namespace

ScheduleKind parse_schedule_kind(const std::string& name) { return parse_enum<ScheduleKind>(name); }

std::string schedule_kind_name(ScheduleKind kind) { return std::string(enum_name(kind)); }

void validate(const ScheduleSpec& spec) {
  const std::string kind = schedule_kind_name(spec.kind);
  PW_INPUT_CHECK(spec.stages >= 1, kind << " schedule: " << spec.stages << " pipeline stages; need at least 1");
  PW_INPUT_CHECK(spec.micro_batches >= 1,
                 kind << " schedule: " << spec.micro_batches << " micro-batches; need at least 1");
  if (needs_at_least_one_micro_batch_per_stage(spec.kind)) {
    PW_INPUT_CHECK(spec.micro_batches >= spec.stages,
                   kind << " schedule: " << spec.micro_batches << " micro-batches for " << spec.stages
                        << " stages; it needs at least one per stage (micro-batches >= stages), gpipe takes fewer");
  }
  if (spec.kind == ScheduleKind::Interleaved || spec.kind == ScheduleKind::InterleavedZeroBubble) {
    PW_INPUT_CHECK(spec.chunks >= 2, kind << " schedule: " << spec.chunks
                                          << " chunk(s) per stage; it needs at least 2 (use 1f1b for one)");
    PW_INPUT_CHECK(spec.micro_batches % spec.stages == 0,
                   kind << " schedule: " << spec.micro_batches << " micro-batches is not a multiple of "
                        << spec.stages << " stages");
  } else if (chunk_placement(spec.kind) == partition::ChunkPlacement::V) {
    PW_INPUT_CHECK(spec.chunks == 2, kind << " schedule: " << spec.chunks
                                          << " chunks per stage; a V schedule takes exactly 2 (pieces s and 2P-1-s)");
    const int min_micro_batches = v_min_micro_batches(spec.kind, spec.stages);
    PW_INPUT_CHECK(spec.micro_batches >= min_micro_batches,
                   kind << " schedule: " << spec.micro_batches << " micro-batches for " << spec.stages
                        << " stages; it needs at least " << min_micro_batches << " (2 x stages)");
  } else {
    PW_INPUT_CHECK(spec.chunks == 1, kind << " schedule: " << spec.chunks
                                          << " chunks per stage; it takes exactly 1 (only interleaved and V schedules "
                                             "take more)");
  }
}

partition::ChunkPlacement chunk_placement(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::ZeroBubbleV:
    case ScheduleKind::VHalf:
    case ScheduleKind::VMin:
    case ScheduleKind::DualPipeV: return partition::ChunkPlacement::V;
    default: return partition::ChunkPlacement::Interleaved;
  }
}

int default_chunks(ScheduleKind kind) {
  const bool interleaved = kind == ScheduleKind::Interleaved || kind == ScheduleKind::InterleavedZeroBubble;
  return interleaved || chunk_placement(kind) == partition::ChunkPlacement::V ? 2 : 1;
}

bool splits_backward(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::GPipe:
    case ScheduleKind::OneFOneB:
    case ScheduleKind::Interleaved: return false;
    default: return true;
  }
}

int virtual_stage(const ScheduleSpec& spec, int stage, int chunk) {
  return partition::piece_at(chunk_placement(spec.kind), spec.stages, spec.chunks, stage, chunk);
}

partition::PieceLocation locate_virtual_stage(const ScheduleSpec& spec, int virtual_stage) {
  return partition::locate_piece(chunk_placement(spec.kind), spec.stages, spec.chunks, virtual_stage);
}

int loss_stage(const ScheduleSpec& spec) { return locate_virtual_stage(spec, spec.stages * spec.chunks - 1).stage; }

std::vector<Instruction> stage_schedule(const ScheduleSpec& spec, int stage) {
  validate(spec);
  PW_INPUT_CHECK(stage >= 0 && stage < spec.stages,
                 "stage " << stage << " is outside the pipeline's stages 0.." << spec.stages - 1);
  switch (spec.kind) {
    case ScheduleKind::GPipe: return gpipe(spec, stage);
    case ScheduleKind::OneFOneB: return one_f_one_b(spec, stage);
    case ScheduleKind::Interleaved: return interleaved(spec, stage);
    case ScheduleKind::ZeroBubbleH1: return zero_bubble_h1(spec, stage);
    case ScheduleKind::ZeroBubbleH2: return zero_bubble_h2(spec, stage);
    case ScheduleKind::InterleavedZeroBubble: return interleaved_zero_bubble(spec, stage);
    case ScheduleKind::ZeroBubbleV: return zero_bubble_v(spec, stage);
    case ScheduleKind::VHalf:
    case ScheduleKind::VMin: return memory_limited_v(spec, stage);
    case ScheduleKind::DualPipeV: return dual_pipe_v(spec, stage);
  }
  PW_FAIL("unknown ScheduleKind " << static_cast<int>(spec.kind));
}

int peak_in_flight(const std::vector<Instruction>& program, HeldUntil until) {
  int held = 0, peak = 0;
  for (const Instruction& in : program) {
    switch (in.op) {
      case OpType::Forward: peak = std::max(peak, ++held); break;
      case OpType::Backward: --held; break;
      case OpType::BackwardInput:
        if (until == HeldUntil::BackwardStarts) --held;
        break;
      case OpType::BackwardWeight:
        if (until == HeldUntil::WeightGradientDone) --held;
        break;
      default: break;
    }
  }
  return peak;
}

}  // namespace pw::pipeline
