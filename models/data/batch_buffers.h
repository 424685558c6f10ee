#pragma once
// Host buffers for loader batches, reused instead of allocated per batch: a buffer goes back to
// the pool when the last tensor sharing it (the batch, its micro-batch views, a copy still in
// flight) is gone. With HostMemory::Pinned the buffers are page-locked where a GPU is present, so
// a GPU stage copies from them without staging. Safe to use from several loader threads.
#include <mutex>
#include <vector>

#include "kernels/tensor.h"

namespace pw::models::data {

class BatchBuffers {
 public:
  explicit BatchBuffers(kernels::HostMemory memory = kernels::HostMemory::Pageable) : memory_(memory) {}
  BatchBuffers(const BatchBuffers&) = delete;
  BatchBuffers& operator=(const BatchBuffers&) = delete;

  // A tensor of `shape` and `dtype` no one else holds: a free buffer of the pool when one has the
  // size, else a new one that joins the pool.
  kernels::Tensor acquire(const kernels::Shape& shape, kernels::DType dtype);
  kernels::HostMemory memory() const { return memory_; }
  std::size_t size() const;   // buffers in the pool, free or not
  static constexpr std::size_t kMaxBuffers = 32;   // past this, free buffers of other shapes go

 private:
  kernels::HostMemory memory_;
  mutable std::mutex mutex_;
  std::vector<kernels::Tensor> pool_;
};

}  // namespace pw::models::data
