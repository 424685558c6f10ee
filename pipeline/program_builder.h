#pragma once
// Emits a stage's compute instructions wrapped in the communication the stage_schedule contract
// asks for (schedule.h): the generators of every kind build their programs with it.
#include <utility>
#include <vector>

#include "pipeline/schedule.h"

namespace pw::pipeline {

class ProgramBuilder {
 public:
  ProgramBuilder(const ScheduleSpec& spec, int stage) : spec_(spec), stage_(stage) {}

  void forward(int micro_batch, int chunk) {
    const int v = virtual_stage(spec_, stage_, chunk);
    if (!is_first(v)) emit(OpType::RecvActivation, micro_batch, chunk);
    emit(OpType::Forward, micro_batch, chunk);
    if (!is_last(v)) emit(OpType::SendActivation, micro_batch, chunk);
  }
  // Backward or BackwardInput: both consume the output gradient and produce the input gradient.
  void backward(OpType op, int micro_batch, int chunk) {
    const int v = virtual_stage(spec_, stage_, chunk);
    if (!is_last(v)) emit(OpType::RecvGradient, micro_batch, chunk);
    emit(op, micro_batch, chunk);
    if (!is_first(v)) emit(OpType::SendGradient, micro_batch, chunk);
  }
  void backward_weight(int micro_batch, int chunk) { emit(OpType::BackwardWeight, micro_batch, chunk); }
  // An overlapped pair (DualPipe's F&B): both inputs are received first, then the forward marked
  // Overlap::WithNext right before its backward partner, then both outputs are sent.
  void forward_backward(int f_micro_batch, int f_chunk, OpType b_op, int b_micro_batch, int b_chunk) {
    const int fv = virtual_stage(spec_, stage_, f_chunk), bv = virtual_stage(spec_, stage_, b_chunk);
    if (!is_first(fv)) emit(OpType::RecvActivation, f_micro_batch, f_chunk);
    if (!is_last(bv)) emit(OpType::RecvGradient, b_micro_batch, b_chunk);
    program_.push_back({OpType::Forward, f_micro_batch, f_chunk, Overlap::WithNext});
    emit(b_op, b_micro_batch, b_chunk);
    if (!is_last(fv)) emit(OpType::SendActivation, f_micro_batch, f_chunk);
    if (!is_first(bv)) emit(OpType::SendGradient, b_micro_batch, b_chunk);
  }

  std::vector<Instruction> finish() && {
    program_.push_back({OpType::ReduceGrads});
    program_.push_back({OpType::OptimizerStep});
    return std::move(program_);
  }

 private:
  bool is_first(int v) const { return v == 0; }
  bool is_last(int v) const { return v == spec_.stages * spec_.chunks - 1; }
  void emit(OpType op, int micro_batch, int chunk) { program_.push_back({op, micro_batch, chunk}); }

  const ScheduleSpec& spec_;
  int stage_;
  std::vector<Instruction> program_;
};

}  // namespace pw::pipeline
