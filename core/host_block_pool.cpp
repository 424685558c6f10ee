#include "core/host_block_pool.h"

#include <algorithm>
#include <cstring>

#include "core/host_pages.h"

namespace pw {

HostBlockPool::HostBlockPool(std::size_t max_cached_bytes) : max_cached_bytes_(max_cached_bytes) {}

HostBlockPool::~HostBlockPool() { release_cached(); }

HostBlockPool& HostBlockPool::shared() {
  // Never destroyed: blocks may be given back by objects that outlive any static of this file.
  static auto* pool = new HostBlockPool(std::size_t{1} << 30);
  return *pool;
}

void* HostBlockPool::take(std::size_t bytes) {
  void* reused = nullptr;
  {
    std::lock_guard lock(mutex_);
    if (auto it = free_by_size_.find(bytes); it != free_by_size_.end() && !it->second.empty()) {
      reused = it->second.back();
      it->second.pop_back();
      stats_.cached -= static_cast<std::int64_t>(bytes);
      stats_.in_use += static_cast<std::int64_t>(bytes);
      stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
      ++stats_.reused;
    }
  }
  if (reused != nullptr) {
    std::memset(reused, 0, bytes);   // resident pages: far cheaper than the faults of fresh ones
    return reused;
  }
  void* block = map_host_pages(bytes);   // fresh pages are zero
  std::lock_guard lock(mutex_);
  stats_.in_use += static_cast<std::int64_t>(bytes);
  stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
  ++stats_.mapped;
  return block;
}

void HostBlockPool::give_back(void* block, std::size_t bytes) noexcept {
  if (block == nullptr) return;
  {
    std::lock_guard lock(mutex_);
    stats_.in_use -= static_cast<std::int64_t>(bytes);
    if (static_cast<std::size_t>(stats_.cached) + bytes <= max_cached_bytes_) {
      try {
        free_by_size_[bytes].push_back(block);
        stats_.cached += static_cast<std::int64_t>(bytes);
        return;
      } catch (...) {   // no room to remember it: it goes back to the kernel
      }
    }
  }
  unmap_host_pages(block, bytes);
}

void HostBlockPool::release_cached() noexcept {
  std::map<std::size_t, std::vector<void*>> cached;
  {
    std::lock_guard lock(mutex_);
    cached.swap(free_by_size_);
    stats_.cached = 0;
  }
  for (auto& [bytes, blocks] : cached)
    for (void* b : blocks) unmap_host_pages(b, bytes);
}

HostBlockPool::Stats HostBlockPool::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace pw
