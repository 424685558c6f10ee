#pragma once
// Host memory a device's work holds outside that device's cap (offloaded optimizer state and the
// staging it copies through: Tensor::empty_host), counted by kind per owning device, as the
// device's CachingAllocator counts its own blocks. Nothing here is capped: the point of holding
// memory on the host is that it leaves the device's budget.
#include <cstdint>

#include "kernels/allocator.h"

namespace pw::kernels {

// in_use, peak_in_use and their breakdowns by kind of the host memory held for `owner` (cap 0).
MemoryStats host_memory_stats(Device owner);
void reset_host_memory_peak(Device owner);

namespace detail {
void count_host_allocation(Device owner, MemoryKind kind, std::int64_t bytes);
void count_host_release(Device owner, MemoryKind kind, std::int64_t bytes);
}  // namespace detail

}  // namespace pw::kernels
