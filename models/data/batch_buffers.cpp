#include "models/data/batch_buffers.h"

#include <atomic>

namespace pw::models::data {

kernels::Tensor BatchBuffers::acquire(const kernels::Shape& shape, kernels::DType dtype) {
  std::lock_guard lock(mutex_);
  for (auto& buffer : pool_) {
    // Only the pool holds it, so no other thread can take a share of it while we look. The fence
    // orders the last holder's reads (it dropped its share after them) before our writes.
    if (buffer.storage_users() == 1 && buffer.shape() == shape && buffer.dtype() == dtype) {
      std::atomic_thread_fence(std::memory_order_acquire);
      return buffer;
    }
  }
  // Free buffers of other shapes are kept (a batch asks for inputs and labels), unless the pool has
  // grown past what any feed keeps alive: then they go (the short last batch of an evaluation).
  if (pool_.size() >= kMaxBuffers)
    std::erase_if(pool_, [&](const kernels::Tensor& b) { return b.storage_users() == 1; });
  auto fresh = memory_ == kernels::HostMemory::Pinned ? kernels::Tensor::empty_pinned(shape, dtype)
                                                      : kernels::Tensor::empty(shape, dtype);
  pool_.push_back(fresh);
  return fresh;
}

std::size_t BatchBuffers::size() const {
  std::lock_guard lock(mutex_);
  return pool_.size();
}

}  // namespace pw::models::data
