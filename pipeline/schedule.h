#pragma once
// Pipeline schedules as pure data (after DeepSpeed's schedule.py and torch.distributed.pipelining):
// a pure function (kind, stages, micro-batches, stage[, chunks]) -> the ordered instruction list
// that stage runs for one mini-batch. No devices, no sockets: tested on its own.
#include <string>
#include <vector>

#include "partition/piece_placement.h"
#include "pipewright/enums.h"

namespace pw::pipeline {

// ScheduleKind and its names: pipewright/enums.h.

// "gpipe", "1f1b", "interleaved", "zb-h1", ...; anything else is an InputError listing them.
ScheduleKind parse_schedule_kind(const std::string& name);
std::string schedule_kind_name(ScheduleKind kind);

enum class OpType {
  Forward,          // F: forward of (micro_batch, chunk); keeps its context for backward
  Backward,         // B: full backward (input and weight gradients)
  BackwardInput,    // Bi: input gradient only (ZB-H1)
  BackwardWeight,   // W: weight gradient of a micro-batch whose Bi already ran (ZB-H1)
  RecvActivation,   // input activation of (micro_batch, chunk) from the previous virtual stage
  SendActivation,   // output activation of (micro_batch, chunk) to the next virtual stage
  RecvGradient,     // output gradient of (micro_batch, chunk) from the next virtual stage
  SendGradient,     // input gradient of (micro_batch, chunk) to the previous virtual stage
  Recompute,        // re-run the forward of (micro_batch, chunk) to rebuild a dropped context
  ReduceGrads,      // gradients of this stage are final (data-parallel all-reduce, tied weights)
  OptimizerStep,    // one optimizer step for the mini-batch
};

// WithNext on a Forward: it and the backward (B or Bi) right after it are one overlapped F&B unit
// (DualPipe): the simulator costs the pair as one, the executor runs the two in order.
enum class Overlap { None, WithNext };

struct Instruction {
  OpType op;
  int micro_batch = -1;   // -1 for ReduceGrads and OptimizerStep
  int chunk = 0;          // model chunk on this stage, 0..chunks-1 (interleaved), else 0
  Overlap overlap = Overlap::None;
  friend bool operator==(const Instruction&, const Instruction&) = default;
};

struct ScheduleSpec {
  ScheduleKind kind = ScheduleKind::OneFOneB;
  int stages = 1;          // P
  int micro_batches = 1;   // M
  int chunks = 1;          // V, model chunks per stage (interleaved kinds: 2 or more; V-placed kinds: 2; else 1)
};

// How a kind places its chunks on stages (partition/piece_placement.h): V for zb-v, v-half, v-min
// and dualpipev, interleaved for the others.
partition::ChunkPlacement chunk_placement(ScheduleKind kind);
// The chunks per stage a kind runs when the job does not say: 2 for interleaved kinds and V-placed
// ones, 1 for the others.
int default_chunks(ScheduleKind kind);
// Whether a kind splits each backward into its input half (Bi) and weight half (W).
bool splits_backward(ScheduleKind kind);

// Throws InputError with a one-line reason (P < 1, M < 1, M < P where the kind needs M >= P,
// interleaved with V < 2 or M not a multiple of P, V kinds with V != 2, dualpipev with M < 2P,
// V != 1 for the other kinds).
void validate(const ScheduleSpec& spec);

// Virtual stages: the model is cut into P * V consecutive pieces; where piece v runs follows the
// kind's placement (interleaved: stage v % P as its chunk v / P; V: stages 0..P-1 then back).
// With V = 1 piece v is stage v.
int virtual_stage(const ScheduleSpec& spec, int stage, int chunk);
partition::PieceLocation locate_virtual_stage(const ScheduleSpec& spec, int virtual_stage);
// The stage that runs the last piece, which computes the loss and reads the labels.
int loss_stage(const ScheduleSpec& spec);

// The instruction list of `stage` for one mini-batch, communication included. It always ends
// with ReduceGrads then OptimizerStep. Every Forward of a non-first virtual stage is preceded by
// its RecvActivation, every Forward of a non-last virtual stage followed by its SendActivation;
// likewise RecvGradient / SendGradient around backwards. The last virtual stage computes the loss
// inside its Forward and starts its backward from the loss gradient (no RecvGradient).
std::vector<Instruction> stage_schedule(const ScheduleSpec& spec, int stage);

// The most forwards of (micro_batch, chunk) a program holds at once, counting a forward until its
// backward starts (B or Bi: what 1F1B bounds) or until its weight gradient is done (B or W: when
// every saved activation is freed). This is the activation memory the planner budgets for.
enum class HeldUntil { BackwardStarts, WeightGradientDone };
int peak_in_flight(const std::vector<Instruction>& program, HeldUntil until);

// Compact text: "F0 F1 B0 W0 ..." with chunk suffixes "F0.1" when V > 1, communication written
// as "rA0 sA0 rG0 sG0", "R0" for Recompute, "RG" ReduceGrads, "S" OptimizerStep. A full backward
// is "B0", the input half "Bi0" and the weight half "W0" (distinct, so from_text can invert it).
// A forward overlapped with the backward after it (Overlap::WithNext) ends in '&': "F3.0& B1.1".
// Since the text does not carry V, every micro-batch token gets a chunk suffix as soon as one
// instruction of the program has chunk > 0.
std::string to_text(const std::vector<Instruction>& program, bool with_communication = false);
std::vector<Instruction> from_text(const std::string& text);   // inverse of to_text; InputError on a bad token
// One instruction as it reads in a program of a schedule with `chunks` chunks per stage ("rG3", "F3.1").
std::string instruction_text(const Instruction& instruction, int chunks);

std::string op_name(OpType op);

}  // namespace pw::pipeline
