#include "kernels/math_mode.h"

#include <atomic>

namespace pw::kernels {
namespace {
std::atomic<bool> g_tf32{false};
std::atomic<bool> g_deterministic{false};
}  // namespace

void set_math_mode(MathMode mode) {
  g_tf32.store(mode.tf32 == Tf32::On, std::memory_order_relaxed);
  g_deterministic.store(mode.determinism == Determinism::Deterministic, std::memory_order_relaxed);
}

MathMode math_mode() {
  return {g_tf32.load(std::memory_order_relaxed) ? Tf32::On : Tf32::Off,
          g_deterministic.load(std::memory_order_relaxed) ? Determinism::Deterministic : Determinism::Fastest};
}

}  // namespace pw::kernels
