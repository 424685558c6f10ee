#pragma once
// Monotonic time for timing steps and deadlines.
#include <chrono>

namespace pw {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace pw
