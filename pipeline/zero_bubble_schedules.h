#pragma once
// ZB-H2 and interleaved zero bubble: programs whose backward is split into its input half (Bi,
// on the critical path) and weight half (W, deferred to fill the bubbles).
#include <vector>

#include "pipeline/schedule.h"

namespace pw::pipeline {

// ZB-H2 (Qi et al., "Zero Bubble Pipeline Parallelism", 2023): list-scheduled with unit op times so
// that stage s warms up with up to 2(P - s) - 1 forwards (1F1B: P - s - 1), every stage keeps at
// most 2P - 1 micro-batches whose W is not done, and W's fill the tail. With F = Bi = W and M >= 2P - 1
// every stage works without a gap from its first forward to its last W.
std::vector<Instruction> zero_bubble_h2(const ScheduleSpec& spec, int stage);

// Interleaved zero bubble (after torch.distributed.pipelining's ScheduleInterleavedZeroBubble):
// interleaved 1F1B's placement and forward order, backwards split, W's deferred to fill the
// bubbles: stage s holds at most s more units than interleaved 1F1B until their W is done.
std::vector<Instruction> interleaved_zero_bubble(const ScheduleSpec& spec, int stage);

}  // namespace pw::pipeline
