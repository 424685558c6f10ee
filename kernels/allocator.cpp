#include "kernels/allocator.h"

#include <cstdlib>
#include <sstream>

#include "core/host_memory.h"
#include "core/host_pages.h"
#include "core/log.h"
#include "core/units.h"
#include "kernels/cuda_check.h"
#include "kernels/runtime.h"
#include "kernels/tensor.h"

namespace pw::kernels {
namespace {
std::string oom_message(Device device, std::int64_t requested, std::int64_t free_bytes, std::int64_t cap) {
  std::ostringstream out;
  out << "out of memory on " << device.str() << ": asked for " << format_bytes(requested) << " ("
      << requested << " bytes), " << format_bytes(free_bytes) << " (" << free_bytes << " bytes) free";
  if (cap > 0) out << " of a " << format_bytes(cap) << " cap; raise the device's memory cap or lower the batch size";
  return out.str();
}
}  // namespace

OutOfMemory::OutOfMemory(Device d, std::int64_t req, std::int64_t free_b, std::int64_t cap)
    : Error(oom_message(d, req, free_b, cap)), device(d), requested(req), free_bytes(free_b) {}

OutOfMemory::OutOfMemory(const OutOfMemory& cause, const std::string& context)
    : Error(context + cause.what()), device(cause.device), requested(cause.requested), free_bytes(cause.free_bytes) {}

namespace {
thread_local MemoryKind t_memory_kind = MemoryKind::Workspace;
std::size_t index_of(MemoryKind kind) { return static_cast<std::size_t>(kind); }
}  // namespace

const char* memory_kind_name(MemoryKind kind) {
  switch (kind) {
    case MemoryKind::Parameters: return "parameters";
    case MemoryKind::Gradients: return "gradients";
    case MemoryKind::MasterWeights: return "master_weights";
    case MemoryKind::OptimizerState: return "optimizer_state";
    case MemoryKind::Activations: return "activations";
    case MemoryKind::Communication: return "communication";
    case MemoryKind::Workspace: return "workspace";
  }
  return "workspace";
}

void set_memory_kind(const Tensor& t, MemoryKind kind) {
  if (t.defined()) DeviceRuntime::get(t.device()).allocator().set_kind(t.raw(), kind);
}

MemoryKindScope::MemoryKindScope(MemoryKind kind) : previous_(t_memory_kind) { t_memory_kind = kind; }
MemoryKindScope::~MemoryKindScope() { t_memory_kind = previous_; }
MemoryKind MemoryKindScope::current() { return t_memory_kind; }

CachingAllocator::CachingAllocator(Device device) : device_(device) {}

void CachingAllocator::count_in(const LiveBlock& block) {
  const auto bytes = static_cast<std::int64_t>(block.bytes);
  stats_.in_use += bytes;
  stats_.in_use_by_kind[index_of(block.kind)] += bytes;
  if (stats_.in_use > stats_.peak_in_use) {
    stats_.peak_in_use = stats_.in_use;
    stats_.peak_by_kind = stats_.in_use_by_kind;
  }
  ++stats_.allocations;
}

void CachingAllocator::set_kind(void* ptr, MemoryKind kind) {
  std::lock_guard lock(mutex_);
  auto it = live_blocks_.find(ptr);
  if (it == live_blocks_.end() || it->second.kind == kind) return;
  const auto bytes = static_cast<std::int64_t>(it->second.bytes);
  stats_.in_use_by_kind[index_of(it->second.kind)] -= bytes;
  stats_.in_use_by_kind[index_of(kind)] += bytes;
  it->second.kind = kind;
}

CachingAllocator::~CachingAllocator() {
  std::lock_guard lock(mutex_);
  release_cache_locked();
  // Live blocks at exit belong to tensors that outlive the runtime (static lifetime); leave them.
}

std::size_t CachingAllocator::round_size(std::size_t bytes) {
  constexpr std::size_t kSmall = 512;
  constexpr std::size_t kLarge = 1 << 20;
  if (bytes == 0) bytes = 1;
  if (bytes < kLarge) return (bytes + kSmall - 1) / kSmall * kSmall;
  constexpr std::size_t kLargeStep = 1 << 16;
  return (bytes + kLargeStep - 1) / kLargeStep * kLargeStep;
}

void* CachingAllocator::raw_allocate(std::size_t bytes) {
  if (device_.is_cpu()) {
    // Large blocks on huge pages, faulted in here rather than when first written: a tensor that
    // a socket receive writes into must not fault inside the kernel's copy. Such a receive ran
    // slowly enough for the sender to see a zero window, and the connection then stalled for
    // 100-200 ms (transport_bench: one or two of a run's 64 MiB frames took 120-220 ms, not 20).
    void* p = nullptr;
    try {
      p = bytes >= kHugePageBytes ? map_host_pages(bytes) : std::aligned_alloc(64, bytes);
    } catch (const std::bad_alloc&) {
    }
    if (p == nullptr) throw OutOfMemory(device_, static_cast<std::int64_t>(bytes), host_available_memory_bytes(), stats_.cap);
    return p;
  }
#ifdef PW_WITH_CUDA
  CudaDeviceGuard guard(device_.index);
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess && err != cudaErrorMemoryAllocation) {
    // Not a full device: a sticky error from earlier work (an illegal address...) shows up here.
    cudaGetLastError();
    PW_CUDA_CHECK(err);
  }
  if (err != cudaSuccess) {
    cudaGetLastError();
    std::size_t free_b = 0, total = 0;
    cudaMemGetInfo(&free_b, &total);
    throw OutOfMemory(device_, static_cast<std::int64_t>(bytes), static_cast<std::int64_t>(free_b), stats_.cap);
  }
  return p;
#else
  throw Error("pipewright was built without CUDA (PW_WITH_CUDA=OFF); cannot allocate on " + device_.str());
#endif
}

void CachingAllocator::raw_free(void* ptr, std::size_t bytes) noexcept {
  if (device_.is_cpu()) {
    if (bytes >= kHugePageBytes) unmap_host_pages(ptr, bytes);
    else std::free(ptr);
    return;
  }
#ifdef PW_WITH_CUDA
  int previous = 0;
  const bool switched = cudaGetDevice(&previous) == cudaSuccess && previous != device_.index &&
                        cudaSetDevice(device_.index) == cudaSuccess;
  const cudaError_t err = cudaFree(ptr);
  if (switched) cudaSetDevice(previous);
  if (err != cudaSuccess) PW_LOG(Warn, "cudaFree on " << device_.str() << ": " << cudaGetErrorString(err));
#endif
}

std::multimap<std::size_t, void*>::iterator CachingAllocator::cached_block_for(std::size_t size) {
  auto it = free_blocks_.lower_bound(size);
  // Reuse a cached block when it is not much larger than asked: a small one up to twice the size,
  // a large one up to a quarter more. A block counts whole in in_use (and against the cap), so a
  // 100 MB block handed out for 51 MB of optimizer state (freed gradients, replaced by a bucket's)
  // would be 49 MB held for nothing, and the by-kind figures would say so.
  const std::size_t largest_reused = size < (std::size_t{1} << 20) ? size * 2 : size + size / 4;
  return it != free_blocks_.end() && it->first <= largest_reused ? it : free_blocks_.end();
}

bool CachingAllocator::reserve(std::size_t bytes) {
  const std::size_t size = round_size(bytes);
  const auto want = static_cast<std::int64_t>(size);
  {
    std::lock_guard lock(mutex_);
    if (cached_block_for(size) != free_blocks_.end()) return true;
    if (stats_.cap > 0 && stats_.reserved + want > stats_.cap) return false;
    claim_locked(want);
  }
  void* p = nullptr;
  try {
    p = map_claimed(size, AfterOutOfMemory::Throw);
  } catch (const OutOfMemory&) {
    return false;
  }
  std::lock_guard lock(mutex_);
  mapping_ -= want;
  try {
    free_blocks_.emplace(size, p);
  } catch (...) {
    stats_.reserved -= want;
    raw_free(p, size);
    return false;
  }
  return true;
}

void* CachingAllocator::allocate(std::size_t bytes) {
  const std::size_t size = round_size(bytes);
  const auto want = static_cast<std::int64_t>(size);
  {
    std::lock_guard lock(mutex_);
    if (auto it = cached_block_for(size); it != free_blocks_.end()) {
      void* p = it->second;
      const LiveBlock block{it->first, t_memory_kind};
      free_blocks_.erase(it);
      live_blocks_[p] = block;
      count_in(block);
      return p;
    }
    if (stats_.cap > 0 && stats_.reserved + want > stats_.cap) {
      release_cache_locked();
      if (stats_.in_use + mapping_ + want > stats_.cap) {
        throw OutOfMemory(device_, want, stats_.cap - stats_.in_use - mapping_, stats_.cap);
      }
    }
    claim_locked(want);
  }
  void* p = map_claimed(size, AfterOutOfMemory::ReleaseCacheAndRetry);
  std::lock_guard lock(mutex_);
  mapping_ -= want;
  const LiveBlock block{size, t_memory_kind};
  live_blocks_[p] = block;
  count_in(block);
  return p;
}

// Outside the lock: a large CPU block is faulted in as it is mapped (100-146 ms for 64 MiB of fresh
// huge pages on a VM whose host backs them on first touch), and meanwhile other threads allocate
// and free on this device, other connections' frames among them.
void* CachingAllocator::map_claimed(std::size_t size, AfterOutOfMemory after) {
  try {
    try {
      return raw_allocate(size);
    } catch (const OutOfMemory&) {
      if (after == AfterOutOfMemory::Throw) throw;
      {
        std::lock_guard lock(mutex_);
        release_cache_locked();
      }
      return raw_allocate(size);
    }
  } catch (...) {
    std::lock_guard lock(mutex_);
    unclaim_locked(static_cast<std::int64_t>(size));
    throw;
  }
}

void CachingAllocator::claim_locked(std::int64_t bytes) {
  stats_.reserved += bytes;
  mapping_ += bytes;
}

void CachingAllocator::unclaim_locked(std::int64_t bytes) {
  stats_.reserved -= bytes;
  mapping_ -= bytes;
}

void CachingAllocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard lock(mutex_);
  auto it = live_blocks_.find(ptr);
  if (it == live_blocks_.end()) {
    PW_LOG(Error, "deallocate of unknown pointer on " << device_.str());
    return;
  }
  stats_.in_use -= static_cast<std::int64_t>(it->second.bytes);
  stats_.in_use_by_kind[index_of(it->second.kind)] -= static_cast<std::int64_t>(it->second.bytes);
  free_blocks_.emplace(it->second.bytes, ptr);
  live_blocks_.erase(it);
}

void CachingAllocator::set_cap(std::int64_t bytes) {
  std::lock_guard lock(mutex_);
  stats_.cap = bytes;
  if (bytes > 0 && stats_.reserved > bytes) release_cache_locked();
}

void CachingAllocator::release_cache() {
  std::lock_guard lock(mutex_);
  release_cache_locked();
}

void CachingAllocator::release_cache_locked() {
  for (auto& [size, p] : free_blocks_) {
    raw_free(p, size);
    stats_.reserved -= static_cast<std::int64_t>(size);
  }
  free_blocks_.clear();
}

void CachingAllocator::reset_peak() {
  std::lock_guard lock(mutex_);
  stats_.peak_in_use = stats_.in_use;
  stats_.peak_by_kind = stats_.in_use_by_kind;
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace pw::kernels
