#pragma once
// Programs of the V-placed kinds (stage s holds piece s as chunk 0 and piece 2P-1-s as chunk 1).
//
// zb-v is the Zero Bubble paper's V schedule as phase lists: 2(P-s)-1 chunk-0 forwards, forwards
// alternating between the chunks, chunk 1's first backwards with their W right after, a steady
// F0 Bi0 W0 F1 Bi1 W1, then a cool-down whose W's fill the wait for gradients.
//
// v-half and v-min repeat the building blocks of "Pipeline Parallelism with Controllable Memory"
// (Qi et al. 2024) and pack their warm-up and cool-down (pipeline/v_building_block.h): each stage
// holds the block's peak, 2*floor((P+2)/2) and 2*floor((P+4)/3) chunk activations, and at
// F = Bi = W (v-half: whenever W + 2Bi >= 2F and W + 2F >= 2Bi) the bubble does not grow with M.
//
// dualpipev runs DeepSeek's DualPipeV phases: chunk-0 warm-up, forward pairs, split backwards of
// chunk 1, then a steady state of overlapped F&B pairs (Overlap::WithNext), then the drain with
// the weight halves deferred into the tail.
#include <vector>

#include "pipeline/schedule.h"

namespace pw::pipeline {

// Chunk activations (each half a stage's) a stage of zb-v, v-half or v-min holds at most, a forward
// counted until its weight half is done: 2P for zb-v (1F1B's P whole micro-batches, what its phases
// reach), 2*floor((P+2)/2) for v-half and 2*floor((P+4)/3) for v-min (their building blocks' peaks,
// the paper's (P+2)/2 and (P+4)/3 micro-batches).
int v_activation_limit(ScheduleKind kind, int stages);

// The fewest micro-batches a V kind accepts: 2P for dualpipev (its warm-up and drain need them),
// P for the others.
int v_min_micro_batches(ScheduleKind kind, int stages);

std::vector<Instruction> memory_limited_v(const ScheduleSpec& spec, int stage);
std::vector<Instruction> zero_bubble_v(const ScheduleSpec& spec, int stage);
std::vector<Instruction> dual_pipe_v(const ScheduleSpec& spec, int stage);

}  // namespace pw::pipeline
