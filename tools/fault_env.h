#pragma once
// Test-only faults for pipewright's own processes, from the environment (never set in a real job):
//   PW_INJECT_FAULT=KIND@STEP:RANK[/ATTEMPT],...   KIND nonfinite-grad, sigkill, stall or disk-full
//                                                  (that step's checkpoint write fails: ENOSPC); STEP 1-based;
//                                                  ATTEMPT the launcher's restart count (default 0)
//   PW_INJECT_STEP_DELAY=RANK:MS,...                every step of RANK takes MS milliseconds longer
// The library only sees the hooks these become (train/fault_injection.h).
#include <chrono>

namespace pw::tools {

inline constexpr const char* kInjectFaultEnv = "PW_INJECT_FAULT";
inline constexpr const char* kInjectStepDelayEnv = "PW_INJECT_STEP_DELAY";

// Installs the hooks the two variables ask for; InputError saying what is accepted when one is malformed.
void install_fault_hooks_from_environment();

}  // namespace pw::tools
