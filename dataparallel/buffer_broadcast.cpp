#include "dataparallel/buffer_broadcast.h"

#include <map>
#include <string>
#include <utility>

#include "kernels/allocator.h"

namespace pw::dp {

void broadcast_buffers(Collective& collective, const std::vector<models::Buffer*>& buffers, int root) {
  // Groups by dtype and device, each in the buffers' order (the same on every member: every
  // replica of a stage holds the same layers).
  std::map<std::pair<kernels::DType, std::string>, std::vector<models::Buffer*>> groups;
  for (auto* b : buffers)
    if (b->value.numel() > 0) groups[{b->value.dtype(), b->value.device().str()}].push_back(b);
  const bool sending = collective.rank() == root;
  for (auto& [key, group] : groups) {
    std::int64_t total = 0;
    for (auto* b : group) total += b->value.numel();
    kernels::Tensor flat;
    {
      kernels::MemoryKindScope kind(kernels::MemoryKind::Communication);
      flat = kernels::Tensor::empty({total}, key.first, group.front()->value.device());
    }
    std::int64_t at = 0;
    if (sending)
      for (auto* b : group) {
        flat.copy_elements_from(b->value, 0, at, b->value.numel());
        at += b->value.numel();
      }
    collective.broadcast(flat, root);
    if (sending) continue;
    at = 0;
    for (auto* b : group) {
      b->value.copy_elements_from(flat, at, 0, b->value.numel());
      at += b->value.numel();
    }
  }
}

}  // namespace pw::dp
