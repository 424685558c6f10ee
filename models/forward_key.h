#pragma once
// A per-thread key for the forward pass being run, set by whoever drives micro-batches (the
// pipeline executor: a hash of step and micro-batch). Layers that draw random numbers (Dropout)
// derive them from it, so re-running a forward for recomputation reproduces the first run.
#include <cstdint>
#include <optional>

namespace pw::models {

std::optional<std::uint64_t> current_forward_key();

class ForwardKeyGuard {
 public:
  explicit ForwardKeyGuard(std::uint64_t key);
  ~ForwardKeyGuard();
  ForwardKeyGuard(const ForwardKeyGuard&) = delete;
  ForwardKeyGuard& operator=(const ForwardKeyGuard&) = delete;

 private:
  std::optional<std::uint64_t> previous_;
};

}  // namespace pw::models
