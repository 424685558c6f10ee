#pragma once
// Faults injected on purpose, for tests of recovery (never in a real job): hooks a program installs
// before its job starts. The library asks them and never reads the environment; pipewright's CLI
// installs hooks from PW_INJECT_FAULT and PW_INJECT_STEP_DELAY (tools/fault_env.h).
//   NonfiniteGradient  the rank's gradients become NaN just before that step's update
//   Kill               the rank kills itself (SIGKILL) as it is about to make that step
//   Stall              the rank stops in that step's first forward until the job is cancelled
//   DiskFull           the rank's part of that step's checkpoint fails to be written as on a full
//                      disk: "cannot write '<file>': No space left on device" (ENOSPC), the file gone
#include <chrono>
#include <cstdint>
#include <functional>

namespace pw::train {

enum class FaultKind { NonfiniteGradient, Kill, Stall, DiskFull };

struct FaultHooks {
  // Whether to inject `kind` at (1-based step, job rank); asked once per step and rank (DiskFull:
  // once per checkpoint the rank writes, with its step).
  std::function<bool(FaultKind kind, std::int64_t step, int rank)> fault;
  // How much longer every step of `rank` takes (a sleep before its compute): a slow worker.
  std::function<std::chrono::milliseconds(int rank)> step_delay;
};

// Process-wide; an empty member means no such faults (the default).
void set_fault_hooks(FaultHooks hooks);

bool injected_fault(FaultKind kind, std::int64_t step, int rank);
// Kills this process when the hooks say so for (step, rank).
void maybe_kill_at(std::int64_t step, int rank);
std::chrono::milliseconds injected_step_delay(int rank);

}  // namespace pw::train
