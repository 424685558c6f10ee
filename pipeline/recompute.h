#pragma once
// Activation recomputation (GPipe's re-materialisation): a stage that recomputes keeps only its
// input per micro-batch in flight and re-runs the forward just before the backward. The modes
// are the partitioner's (partition/cost_model.h), which budgets memory for them. In a program,
// recomputation is explicit: a Recompute instruction of (micro-batch, chunk) tells the executor
// to drop that forward's context and when to rebuild it.
#include <vector>

#include "partition/cost_model.h"
#include "pipeline/schedule.h"

namespace pw::pipeline {

using RecomputeMode = partition::Recompute;

// ExceptLast leaves the last stage alone: it runs each backward right after its forward anyway.
bool stage_recomputes(RecomputeMode mode, int stage, int stages);

// `program` with Recompute(mb, chunk) inserted right before each backward (B or Bi) of that
// micro-batch and chunk (before the forward of an overlapped F&B pair whose backward it is)
// when `stage` recomputes under `mode`; unchanged otherwise. A unit that
// already has a Recompute gets no second one, so applying it twice changes nothing.
std::vector<Instruction> with_recompute(std::vector<Instruction> program, RecomputeMode mode, int stage, int stages);

// What a stage runs unless it is given a program: stage_schedule with recomputation per `mode`.
std::vector<Instruction> default_program(const ScheduleSpec& spec, int stage, RecomputeMode mode);
// Every stage's, in stage order: what save_schedule_file writes for a user to start editing from.
std::vector<std::vector<Instruction>> default_programs(const ScheduleSpec& spec, RecomputeMode mode);

}  // namespace pw::pipeline
