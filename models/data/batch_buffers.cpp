#include "models/data/batch_buffers.h"

namespace pw::models::data {

kernels::Tensor BatchBuffers::acquire(const kernels::Shape& shape, kernels::DType dtype) {
  std::lock_guard lock(mutex_);
  for (auto& buffer : pool_) {
    // Only the pool holds it, so no other thread can take a share of it while we look.
    if (buffer.storage_users() == 1 && buffer.shape() == shape && buffer.dtype() == dtype) return buffer;
  }
  // A shape no longer asked for (the last, short batch of an evaluation) is let go first.
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
