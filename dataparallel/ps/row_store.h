#pragma once
// The rows of one lock stripe of a ShardTable. A key finds its slot through an open-addressing
// index (linear probing, backward-shift deletion, so no tombstones build up); a slot's floats
// live in fixed-size blocks that never move, and freed slots are reused. Storing a row allocates
// nothing of its own and a lookup touches one probe run and the row: a node-based map spent more
// time in allocation, rehashing and pointer chasing than in copying the rows (perf, ps_bench).
// Blocks come from mmap, so new rows are zero without a memset.
// Lookups over many keys should prefetch (prefetch_index, prefetch_values) a few keys ahead: at
// production sizes every probe and row is a cache miss. Not thread-safe: the stripe's mutex
// guards it.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "dataparallel/ps/bounds.h"

namespace pw::dp {

class RowStore {
 public:
  using Slot = std::uint32_t;
  static constexpr Slot kNone = 0xFFFFFFFFu;

  RowStore() = default;
  // Empties the store and sets the floats of every row (row width plus optimizer state).
  void reset(std::size_t row_floats);

  Slot find(std::int64_t key) const;
  // The key's slot, and whether it was created (then its floats are zero and its step count 0).
  std::pair<Slot, bool> insert(std::int64_t key);
  bool erase(std::int64_t key);
  std::size_t size() const { return size_; }

  float* values(Slot s) { return blocks_[s / rows_per_block_].get() + (s % rows_per_block_) * row_floats_; }
  const float* values(Slot s) const {
    return blocks_[s / rows_per_block_].get() + (s % rows_per_block_) * row_floats_;
  }
  // Hints only: start loading the index bucket where `key`'s probe begins, or a row's floats.
  void prefetch_index(std::int64_t key) const {
    if (!index_.empty()) __builtin_prefetch(&index_[home(key)]);
  }
  void prefetch_values(Slot s) const {
    const char* p = reinterpret_cast<const char*>(values(s));
    const std::size_t bytes = std::min<std::size_t>(row_floats_ * sizeof(float), kPrefetchRowBytes);
    for (std::size_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + b, 1);
  }
  std::int64_t& steps(Slot s) { return slots_[s].steps; }
  std::int64_t steps(Slot s) const { return slots_[s].steps; }
  RecencyList::Handle& recency(Slot s) { return slots_[s].recency; }

  // f(key, slot) for every stored row, in slot order.
  template <typename F>
  void for_each(F f) const {
    for (Slot s = 0; s < static_cast<Slot>(slots_.size()); ++s)
      if (slots_[s].live) f(slots_[s].key, s);
  }

 private:
  static constexpr std::size_t kPrefetchRowBytes = 1024;   // longer rows stream well without hints

  struct Entry {
    std::int64_t key;
    Slot slot;   // kNone: an empty bucket
  };
  struct SlotInfo {
    std::int64_t key = 0;
    std::int64_t steps = 0;
    RecencyList::Handle recency{};
    bool live = false;
  };

  // The top bits of a mixed key: ids often differ only in a few high bits (a feature number
  // shifted up), which multiplying alone would leave in too few buckets.
  std::size_t home(std::int64_t key) const {
    std::uint64_t x = static_cast<std::uint64_t>(key);
    x = (x ^ (x >> 31)) * 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 29)) * 0xBF58476D1CE4E5B9ULL;
    return static_cast<std::size_t>(x >> shift_);
  }
  void grow();          // doubles the index
  // A free slot (reused: its floats hold an old row), or a new one (a new block when the last is
  // full; its floats are zero).
  std::pair<Slot, bool> take_slot();

  std::size_t row_floats_ = 0;
  std::size_t rows_per_block_ = 1;
  struct Unmap {
    std::size_t bytes = 0;
    void operator()(float* p) const;
  };
  std::vector<std::unique_ptr<float[], Unmap>> blocks_;
  std::vector<SlotInfo> slots_;
  std::vector<Slot> free_;
  std::vector<Entry> index_;   // a power of two long, at most half full
  unsigned shift_ = 64;
  std::size_t size_ = 0;
};

}  // namespace pw::dp
