#pragma once
// Host blocks reused by size, as PyTorch's caching host allocator reuses pinned blocks: a block
// given back waits in the pool for the next request of the same size instead of going back to the
// kernel, so memory that was faulted in once is not faulted in again. New blocks come from
// map_host_pages (2 MiB-aligned and marked for transparent huge pages from 2 MiB up) and are
// populated before they are handed out: one call faults a block in, not one fault per page as it
// is first written. Every block handed out is zero. Thread-safe.
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

namespace pw {

class HostBlockPool {
 public:
  struct Stats {
    std::int64_t in_use = 0;        // bytes of blocks handed out and not yet given back
    std::int64_t cached = 0;        // bytes of blocks waiting for reuse
    std::int64_t peak_in_use = 0;
    std::int64_t mapped = 0;        // blocks taken from the kernel
    std::int64_t reused = 0;        // blocks handed out again from the cache
  };

  // `max_cached_bytes`: blocks given back beyond this many cached bytes go back to the kernel.
  explicit HostBlockPool(std::size_t max_cached_bytes);
  ~HostBlockPool();
  HostBlockPool(const HostBlockPool&) = delete;
  HostBlockPool& operator=(const HostBlockPool&) = delete;

  // The process's pool (parameter-server rows and other long-lived host blocks).
  static HostBlockPool& shared();

  // A zeroed block of exactly `bytes` (> 0). Throws std::bad_alloc when the kernel refuses.
  void* take(std::size_t bytes);
  // `block` must come from take(bytes) of this pool.
  void give_back(void* block, std::size_t bytes) noexcept;
  // Returns every cached block to the kernel.
  void release_cached() noexcept;
  Stats stats() const;

 private:
  const std::size_t max_cached_bytes_;
  mutable std::mutex mutex_;
  std::map<std::size_t, std::vector<void*>> free_by_size_;
  Stats stats_;
};

}  // namespace pw
