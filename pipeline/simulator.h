#pragma once
// Discrete-event simulation of a schedule: finds deadlocks and computes the makespan, per-stage
// busy time and the bubble fraction from per-op times. Sends are buffered (a send completes
// without waiting for its receive); a receive waits for the matching send's arrival.
#include <string>
#include <vector>

#include "core/error.h"
#include "pipeline/schedule.h"

namespace pw::pipeline {

struct OpTimes {
  // Per virtual stage (size P * V): seconds per micro-batch.
  std::vector<double> forward;
  std::vector<double> backward_input;    // Bi (for kinds without a split, B = Bi + W)
  std::vector<double> backward_weight;   // W
  std::vector<double> send_activation;   // transfer time of the boundary activation to the next virtual stage
  std::vector<double> send_gradient;     // transfer time of the input gradient to the previous virtual stage
  double optimizer_step = 0.0;           // per stage
  // Per stage (size P), seconds of an overlapped F&B pair (Overlap::WithNext); left empty, a pair
  // takes its forward's time plus its backward's.
  std::vector<double> forward_backward;
  // Equal times everywhere: F = f, Bi = bi, W = w, no transfer cost.
  static OpTimes uniform(const ScheduleSpec& spec, double f, double bi, double w);
};

struct TimedOp {
  Instruction instruction;
  double start = 0.0;
  double end = 0.0;
};

struct SimulationResult {
  double makespan = 0.0;
  std::vector<double> stage_busy;             // compute seconds per stage (F, B, Bi, W, Recompute, step)
  std::vector<double> stage_busy_fraction;    // stage_busy / makespan
  double bubble_fraction = 0.0;               // 1 - sum(stage_busy) / (P * makespan)
  std::vector<std::vector<TimedOp>> timeline;  // per stage, in execution order
};

// What one stage did in a simulation, and the result of all of them (makespan, busy fractions,
// bubble): the end both simulators (this one and shared_cores.h) share.
struct StageRun {
  double finished = 0.0;
  double busy = 0.0;
  std::vector<TimedOp> timeline;
};
SimulationResult simulation_result(std::vector<StageRun> stages);

// A program that is malformed or deadlocks: what() is "schedule <kind>: <detail>". stage() is the
// stage at fault (for a deadlock, the first one blocked), so that callers can point at its source.
class ScheduleError : public Error {
 public:
  ScheduleError(const ScheduleSpec& spec, int stage, std::string detail);
  int stage() const { return stage_; }
  const std::string& detail() const { return detail_; }

 private:
  int stage_;
  std::string detail_;
};

// The compute time of instruction `index` of `stage`'s program under `times` (sends, receives and
// ReduceGrads take none): an overlapped forward (Overlap::WithNext) takes the pair's time
// (times.forward_backward, or its forward's plus the backward's right after it) and that backward
// none. The program must be well formed (`simulate` checks it). One definition for every simulation.
double compute_seconds(const ScheduleSpec& spec, const std::vector<Instruction>& program, std::size_t index,
                       int stage, const OpTimes& times);

// How long a send (SendActivation or SendGradient) of `stage` takes to reach its receiver under
// `times`: none when the receiving virtual stage is on the same stage (a V schedule's turn stays
// on its stage: no link to cross), else the link's transfer of the sending virtual stage.
double send_seconds(const ScheduleSpec& spec, const Instruction& in, int stage, const OpTimes& times);

// Throws ScheduleError naming each blocked stage and the instruction it waits on when the schedule
// deadlocks (or a receive has no matching send), or the stage and instruction of a malformed program.
SimulationResult simulate(const ScheduleSpec& spec, const std::vector<std::vector<Instruction>>& programs,
                          const OpTimes& times);
SimulationResult simulate(const ScheduleSpec& spec, const OpTimes& times);   // uses stage_schedule

// The step x stage grid: one row per stage, one column per time slot of the simulation with
// equal op times, cells in the compact text form ("F3", "B3", "W3", "." for idle).
std::string format_grid(const ScheduleSpec& spec);

}  // namespace pw::pipeline
