#pragma once
// Every schedule kind on one layout (stages, micro-batches, partition method or split, recompute):
// simulated step time, bubble, peak activation memory per stage, messages between stages and
// parameter copies, for `pipewright plan --compare-schedules`.
#include <cstdint>
#include <string>
#include <vector>

#include "pipeline/planner.h"
#include "pipeline/shared_cores.h"

namespace pw::pipeline {

struct ScheduleComparison {
  ScheduleKind kind = ScheduleKind::OneFOneB;
  int chunks = 1;
  std::string unavailable;   // one-line reason this kind does not run on the layout; empty when it does
  double step_seconds = 0.0;      // simulated makespan of one mini-batch
  double bubble_fraction = 0.0;
  std::vector<int> peak_held;     // per stage: most (micro-batch, chunk) units held from F until their W
  std::vector<std::int64_t> peak_activation_bytes;   // per stage: those units' saved activations at their peak
  double messages_per_micro_batch = 0.0;   // sends that cross to another stage
  int parameter_copies = 1;
};

// The layout every kind is tried on: `base` carries stages, micro-batches, recompute, link and
// memory settings (its chunks, placement and in-flight are set per kind). Interleaved kinds run
// `interleaved_chunks` chunks per stage, V-placed ones 2, the rest 1; an explicit split must make
// exactly as many pieces as the kind needs. Kinds that cannot run get their one-line reason. Each
// is simulated with the ranks sharing cores as `sharing` says (pipeline/shared_cores.h).
std::vector<ScheduleComparison> compare_schedules(const partition::ModelDescription& model,
                                                  const std::vector<partition::LayerProfile>& profiles,
                                                  const partition::CostModel& base, const SplitChoice& split,
                                                  int interleaved_chunks, const CoreSharing& sharing = {});

// The most activation bytes `program` keeps at once on `stage`: each unit from its forward until
// its backward at `pieces[v].stash_bytes`, or only its input when the piece recomputes; under a
// split backward, from its input half (Bi) until its weight half (W) at `weight_half_bytes`. A
// program with Recompute ops holds each rebuilt stash from there until its backward, one without
// them is charged one full stash for the micro-batch being recomputed.
// With a split backward, also the most held while an input half runs (the stage's other units
// as they are, the running one at its piece's input_half_peak_bytes, working set included).
struct HeldActivations {
  std::int64_t bytes = 0;
  std::int64_t received_bytes = 0;   // of which received inputs (the allocator's communication kind)
  std::int64_t input_half_peak_bytes = 0;   // 0 without input halves
};
HeldActivations peak_activations(const ScheduleSpec& spec, int stage, const std::vector<Instruction>& program,
                                 const std::vector<partition::StageEstimate>& pieces);
// Its bytes.
std::int64_t peak_activation_bytes(const ScheduleSpec& spec, int stage, const std::vector<Instruction>& program,
                                   const std::vector<partition::StageEstimate>& pieces);

// Point-to-point messages of one mini-batch: sends whose receiving virtual stage runs on another
// stage (a V schedule's turn on stage P - 1 stays local).
int messages_between_stages(const ScheduleSpec& spec, const std::vector<std::vector<Instruction>>& programs);

// Copies of each parameter the schedule keeps: 1 for every kind here (DualPipe, which runs two
// pipelines in opposite directions, would keep 2; DualPipeV folds them onto one copy).
int parameter_copies(ScheduleKind kind);

}  // namespace pw::pipeline
