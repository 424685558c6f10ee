#pragma once
// v-half and v-min built the way "Pipeline Parallelism with Controllable Memory" (Qi et al. 2024)
// builds them: repeat a building block, then pull ops of the warm-up and cool-down earlier.
//
// Time is counted in slots, one chunk op (F, Bi or W of one chunk) per slot. A micro-batch's block
// puts each stage's four passes at fixed slots: the chunk-0 forward, the chunk-1 forward, chunk 1's
// input gradient, chunk 0's input gradient. Going down the stages, the chunk-0 forward and chunk 1's
// input gradient move by the block's offset d (v-min 1 slot, v-half 2), the other two move back by
// one slot; block m is block 0 shifted by 6m slots, so in the steady state every stage runs six ops
// in every six slots. Each weight half takes the first free slot after its input half.
//
// The block's lifespan bounds a stage's activations: a forward is held until its weight half, and
// the steady state holds 2*floor((P+2)/2) chunk activations for v-half and 2*floor((P+4)/3) for
// v-min, the paper's (P+2)/2 and (P+4)/3 micro-batches (two chunks each).
//
// Then the warm-up and cool-down are packed: in slot order, each op before the steady state (stage
// 0's first chunk-0 input half) or after it (stage 0's last chunk-0 forward) moves to the earliest
// free slot after its inputs that keeps the stage within that peak; a second pass does the same for
// the cool-down with the weight halves taken out, then puts them back into the first free slots
// after their input halves (chunk 1's first). The steady state stays as the block put it. The result
// is a valid unit-time execution, so the programs never deadlock whatever the real op times are.
//
// Bubble: with F = Bi = W the steady state has no idle slot, so the bubble is the warm-up's and
// cool-down's and the same for every M >= 2P. With other times the order is kept and runs as soon as
// inputs arrive: v-half's steady state still has no bubble when W + 2Bi >= 2F and W + 2F >= 2Bi
// (the paper's condition); v-min's idles in every block for the unequal times tried (all but
// F = Bi = 1, W = 2), so its bubble grows with M, as the authors' own scheduler (zbv_greedy.py)
// does with the same times.
#include <vector>

#include "pipeline/schedule.h"

namespace pw::pipeline {

struct BlockOp {
  OpType op;   // Forward, BackwardInput or BackwardWeight
  int micro_batch;
  int chunk;
};

// Every stage's op order of v-half or v-min (spec.kind), in execution order.
std::vector<std::vector<BlockOp>> building_block_v_orders(const ScheduleSpec& spec);

// The most chunk activations a stage of v-half or v-min holds (a forward counted until its weight
// half is done): 2*floor((P+2)/2) and 2*floor((P+4)/3), the building blocks' peaks.
int building_block_activation_limit(ScheduleKind kind, int stages);

}  // namespace pw::pipeline
