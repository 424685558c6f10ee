#include "train/fault_injection.h"

#include <csignal>
#include <mutex>

namespace pw::train {
namespace {

std::mutex& hooks_mutex() {
  static std::mutex m;
  return m;
}

FaultHooks& hooks() {
  static FaultHooks installed;
  return installed;
}

}  // namespace

void set_fault_hooks(FaultHooks h) {
  std::lock_guard lock(hooks_mutex());
  hooks() = std::move(h);
}

bool injected_fault(FaultKind kind, std::int64_t step, int rank) {
  std::lock_guard lock(hooks_mutex());
  return hooks().fault && hooks().fault(kind, step, rank);
}

void maybe_kill_at(std::int64_t step, int rank) {
  if (injected_fault(FaultKind::Kill, step, rank)) std::raise(SIGKILL);
}

std::chrono::milliseconds injected_step_delay(int rank) {
  std::lock_guard lock(hooks_mutex());
  return hooks().step_delay ? hooks().step_delay(rank) : std::chrono::milliseconds(0);
}

}  // namespace pw::train
