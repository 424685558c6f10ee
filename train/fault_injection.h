#pragma once
// Faults injected on purpose, for tests of recovery (never set in a real job): the environment
// variable PW_INJECT_FAULT holds entries "KIND@STEP:RANK[/ATTEMPT]" separated by commas, where STEP
// is 1-based (the step as progress lines count it), RANK the job rank, and ATTEMPT the launcher's
// restart count (rpc::kRestartCountEnv, PW_RESTART_COUNT; default 0) in which it fires. Each entry fires once per process.
//   nonfinite-grad  the rank's gradients become NaN just before that step's update
//   sigkill         the rank kills itself (SIGKILL) as it is about to make that step
#include <chrono>
#include <cstdint>
#include <string>

namespace pw::train {

inline constexpr const char* kInjectFaultEnv = "PW_INJECT_FAULT";

enum class FaultKind { NonfiniteGradient, Kill };

// Whether an entry of PW_INJECT_FAULT asks for `kind` at (step, rank) in this attempt; true once.
// A malformed variable is an InputError saying what is accepted.
bool injected_fault(FaultKind kind, std::int64_t step, int rank);

// Kills this process when PW_INJECT_FAULT says so for (step, rank).
void maybe_kill_at(std::int64_t step, int rank);

// A slow worker, for tests of what the others wait for: PW_INJECT_STEP_DELAY holds "RANK:MS"
// entries separated by commas, and every step of that rank takes MS milliseconds longer (a sleep
// before its compute). A malformed variable is an InputError saying what is accepted.
inline constexpr const char* kInjectStepDelayEnv = "PW_INJECT_STEP_DELAY";
std::chrono::milliseconds injected_step_delay(int rank);

}  // namespace pw::train
