#pragma once
// Caching allocator per device with an optional memory cap. Freed blocks stay cached for reuse;
// an allocation that would take the device over its cap first releases the cache, then throws
// OutOfMemory naming the device, the bytes asked for and the bytes free.
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>

#include "core/error.h"
#include "kernels/device.h"

namespace pw::kernels {

class OutOfMemory : public Error {
 public:
  OutOfMemory(Device device, std::int64_t requested, std::int64_t free_bytes, std::int64_t cap);
  // The same failure with `context` (where it happened) in front of the message.
  OutOfMemory(const OutOfMemory& cause, const std::string& context);
  Device device;
  std::int64_t requested;
  std::int64_t free_bytes;
};

// What a block holds, for the memory report by kind. A block takes the kind of the
// MemoryKindScope open on the allocating thread (Workspace when none is); Tensor::set_memory_kind
// changes it afterwards (a weight that becomes a master copy under mixed precision).
enum class MemoryKind { Parameters, Gradients, MasterWeights, OptimizerState, Activations, Communication, Workspace };
inline constexpr std::size_t kMemoryKinds = 7;
// "parameters", "gradients", "master_weights", "optimizer_state", "activations", "communication", "workspace"
const char* memory_kind_name(MemoryKind kind);
using BytesByKind = std::array<std::int64_t, kMemoryKinds>;

class Tensor;
// Counts the storage of `t` under `kind` from now on (a tensor of pinned or foreign memory: no-op).
void set_memory_kind(const Tensor& t, MemoryKind kind);

class MemoryKindScope {
 public:
  explicit MemoryKindScope(MemoryKind kind);
  ~MemoryKindScope();
  MemoryKindScope(const MemoryKindScope&) = delete;
  MemoryKindScope& operator=(const MemoryKindScope&) = delete;
  static MemoryKind current();

 private:
  MemoryKind previous_;
};

struct MemoryStats {
  std::int64_t in_use = 0;     // bytes held by live tensors (rounded block sizes)
  std::int64_t reserved = 0;   // in_use plus cached free blocks
  std::int64_t peak_in_use = 0;
  std::int64_t cap = 0;        // 0: no cap
  std::int64_t allocations = 0;
  BytesByKind in_use_by_kind{};   // in_use by kind
  BytesByKind peak_by_kind{};     // in_use by kind at the moment of peak_in_use
};

class CachingAllocator {
 public:
  explicit CachingAllocator(Device device);
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  void* allocate(std::size_t bytes);
  void deallocate(void* ptr);
  // Counts the live block at `ptr` under `kind` from now on (no-op for a pointer it did not give out).
  void set_kind(void* ptr, MemoryKind kind);

  // Maps a block for `bytes` straight into the cache unless one that fits is cached already, so that
  // a later allocation of that size finds it resident: counted as reserved, never as in use.
  // Returns false, having done nothing, where it would go over the cap or the host (or device) has
  // no memory for it; other errors (a CUDA error from earlier work) are thrown.
  bool reserve(std::size_t bytes);

  void set_cap(std::int64_t bytes);   // 0 removes the cap
  void release_cache();
  void reset_peak();
  MemoryStats stats() const;
  Device device() const { return device_; }
  // The block size an allocation of `bytes` takes (and is counted as): what a planner predicts.
  static std::size_t round_size(std::size_t bytes);

 private:
  void* raw_allocate(std::size_t bytes);
  void raw_free(void* ptr, std::size_t bytes) noexcept;
  void release_cache_locked();
  // Bytes an allocation maps outside the lock: reserved at once, and counted against the cap.
  void claim_locked(std::int64_t bytes);
  void unclaim_locked(std::int64_t bytes);
  enum class AfterOutOfMemory { Throw, ReleaseCacheAndRetry };
  // Maps `size` claimed bytes, taking the lock only to release the cache; gives the claim back
  // if it throws.
  void* map_claimed(std::size_t size, AfterOutOfMemory after);
  // The cached block allocate() would hand out for `size` (a round_size), or free_blocks_.end().
  std::multimap<std::size_t, void*>::iterator cached_block_for(std::size_t size);

  Device device_;
  mutable std::mutex mutex_;
  std::multimap<std::size_t, void*> free_blocks_;
  struct LiveBlock {
    std::size_t bytes;
    MemoryKind kind;
  };
  void count_in(const LiveBlock& block);
  std::unordered_map<void*, LiveBlock> live_blocks_;
  MemoryStats stats_;
  std::int64_t mapping_ = 0;   // claimed bytes being mapped outside the lock
};

}  // namespace pw::kernels
