#pragma once
// Large host blocks straight from the kernel: zeroed, and from 2 MiB up aligned to 2 MiB and marked
// for transparent huge pages (madvise), so that first touch costs one page fault per 2 MiB rather
// than one per 4 KiB (the cost that made fresh 64 MiB transfers and new parameter-server rows slow
// on a freshly booted machine). Where the kernel gives no huge pages the block works all the same.
#include <cstddef>

namespace pw {

inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

enum class Populate { Lazy, Now };   // Now: fault every page in before returning

// Throws std::bad_alloc when the kernel refuses.
void* map_host_pages(std::size_t bytes, Populate populate);
void unmap_host_pages(void* block, std::size_t bytes) noexcept;

}  // namespace pw
