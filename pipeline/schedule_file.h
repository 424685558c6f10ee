#pragma once
// Schedule files: a user's own per-stage programs, in the compact text form with communication
// (as to_text(program, true) prints it), one line per stage in stage order. Blank lines and lines
// starting with '#' are ignored. For example, GPipe on 2 stages with 2 micro-batches:
//   # gpipe, 2 stages, 2 micro-batches
//   F0 sA0 F1 sA1 rG0 B0 rG1 B1 RG S
//   rA0 F0 rA1 F1 B0 sG0 B1 sG1 RG S
// Recomputation is written out: "rG0 R0 B0" re-runs forward 0 right before its backward.
#include <string>
#include <vector>

#include "pipeline/schedule.h"

namespace pw::pipeline {

// Parses and validates the programs before anything runs: one line per stage, every token an
// instruction, every stage's program whole (check_stage_program), and the pipeline free of
// deadlocks and ordering errors (simulate). Any fault is an InputError, one line naming the
// source, the line, the stage and the instruction ("my.sched:3: stage 1 instruction 4 'F1': ...").
std::vector<std::vector<Instruction>> parse_schedule_text(const std::string& text, const ScheduleSpec& spec,
                                                          const std::string& source = "schedule");
// The same for a file; `path` names the source. A file that cannot be read is an InputError too.
std::vector<std::vector<Instruction>> load_schedule_file(const std::string& path, const ScheduleSpec& spec);

// The file text for `programs` (one per stage) under a comment saying the pipeline's shape.
std::string schedule_file_text(const ScheduleSpec& spec, const std::vector<std::vector<Instruction>>& programs);
// Writes it to a temporary name beside `path`, then renames it over `path`.
void save_schedule_file(const std::string& path, const ScheduleSpec& spec,
                        const std::vector<std::vector<Instruction>>& programs);

}  // namespace pw::pipeline
