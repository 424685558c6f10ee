#pragma once
// The per-stage check of a program a user wrote: that it is one whole mini-batch for its stage,
// each instruction once. The order (and deadlocks across stages) is the simulator's job.
#include <vector>

#include "pipeline/schedule.h"

namespace pw::pipeline {

// Throws InputError, one line naming the stage and the instruction ("stage 1 instruction 4 'F1':
// second 'F1' (the first is instruction 2)"), unless `program`:
// - names only micro-batches 0..M-1 and chunks 0..V-1;
// - forwards every (micro-batch, chunk) once and runs its backward once, as B or as Bi and W;
// - receives and sends each of them exactly as its place in the pipeline needs (rA and sG unless
//   it is the first virtual stage, sA and rG unless it is the last), so it pairs with its neighbours;
// - has at most one Recompute of each, and ends with RG then S, each once.
void check_stage_program(const ScheduleSpec& spec, int stage, const std::vector<Instruction>& program);

}  // namespace pw::pipeline
