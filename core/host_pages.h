#pragma once
// Large host blocks straight from the kernel: zeroed, from 2 MiB up aligned to 2 MiB and marked
// for transparent huge pages (madvise), and faulted in before they are returned (one call, not a
// fault per page as the block is first written: page faults of fresh memory made fresh 64 MiB
// transfers and new parameter-server rows slow on a freshly booted machine, and a receive that
// faulted inside the kernel's copy stalled its connection). Where the kernel gives no huge pages
// the block works all the same.
#include <cstddef>

namespace pw {

inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

// Throws std::bad_alloc when the kernel refuses, the pages included.
void* map_host_pages(std::size_t bytes);
void unmap_host_pages(void* block, std::size_t bytes) noexcept;

}  // namespace pw
