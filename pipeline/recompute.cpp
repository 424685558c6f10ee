#include "pipeline/recompute.h"

#include <set>
#include <utility>

namespace pw::pipeline {

bool stage_recomputes(RecomputeMode mode, int stage, int stages) {
  return partition::stage_recomputes(mode, {}, stage, stages);
}

std::vector<Instruction> with_recompute(std::vector<Instruction> program, RecomputeMode mode, int stage, int stages) {
  if (!stage_recomputes(mode, stage, stages)) return program;
  std::set<std::pair<int, int>> recomputed;   // (micro_batch, chunk)
  for (const Instruction& in : program)
    if (in.op == OpType::Recompute) recomputed.insert({in.micro_batch, in.chunk});
  std::vector<Instruction> out;
  out.reserve(program.size() * 2);
  for (const Instruction& in : program) {
    const bool backward = in.op == OpType::Backward || in.op == OpType::BackwardInput;
    if (backward && recomputed.insert({in.micro_batch, in.chunk}).second) {
      // The backward of an overlapped F&B pair has its rebuild before the pair, which stays whole.
      const bool closes_pair = !out.empty() && out.back().overlap == Overlap::WithNext;
      out.insert(closes_pair ? out.end() - 1 : out.end(), {OpType::Recompute, in.micro_batch, in.chunk});
    }
    out.push_back(in);
  }
  return out;
}

std::vector<Instruction> default_program(const ScheduleSpec& spec, int stage, RecomputeMode mode) {
  return with_recompute(stage_schedule(spec, stage), mode, stage, spec.stages);
}

std::vector<std::vector<Instruction>> default_programs(const ScheduleSpec& spec, RecomputeMode mode) {
  validate(spec);
  std::vector<std::vector<Instruction>> programs;
  for (int s = 0; s < spec.stages; ++s) programs.push_back(default_program(spec, s, mode));
  return programs;
}

}  // namespace pw::pipeline
