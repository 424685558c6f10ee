#pragma once
// The rows of one lock stripe of a ShardTable. A key finds its slot through an open-addressing
// index (linear probing, backward-shift deletion, so no tombstones build up); a slot's floats
// live in fixed-size blocks that never move, and freed slots are reused. Storing a row allocates
// nothing of its own and a lookup touches one probe run and the row: a node-based map spent more
// time in allocation, rehashing and pointer chasing than in copying the rows (perf, ps_bench).
// Blocks double from 16 KiB up to 2 MiB and stay at 2 MiB (one transparent huge page each), and
// come zeroed and faulted in from the process's HostBlockPool: a table of a few rows costs a
// few KiB per stripe, and a growing one takes one fault per 2 MiB rather than one per 4 KiB
// page as new rows are written (which made pushes of new keys 3-10x slower; ps_bench).
// Lookups over many keys should prefetch (prefetch_index, prefetch_values) a few keys ahead: at
// production sizes every probe and row is a cache miss. Not thread-safe: the stripe's mutex
// guards it.
#include <algorithm>
#include <bit>
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

  float* values(Slot s) {
    const auto [block, row] = locate(s);
    return blocks_[block].get() + row * row_floats_;
  }
  const float* values(Slot s) const {
    const auto [block, row] = locate(s);
    return blocks_[block].get() + row * row_floats_;
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
  // Block b holds first_rows << b rows while it grows (b < growing_blocks_), then big rows each;
  // both are powers of two, so a slot's block and row are a few shifts away.
  std::pair<std::size_t, std::size_t> locate(Slot s) const {
    const std::size_t units = s >> first_shift_;   // whole first-block sizes before s
    if (units < (std::size_t{1} << growing_blocks_) - 1) {
      const std::size_t b = static_cast<std::size_t>(std::bit_width(units + 1)) - 1;
      return {b, s - (((std::size_t{1} << b) - 1) << first_shift_)};
    }
    const std::size_t past = s - ((((std::size_t{1} << growing_blocks_) - 1)) << first_shift_);
    return {growing_blocks_ + (past >> big_shift_), past & ((std::size_t{1} << big_shift_) - 1)};
  }
  std::size_t rows_of_block(std::size_t b) const {
    return std::size_t{1} << (b < growing_blocks_ ? first_shift_ + b : big_shift_);
  }
  void grow();          // doubles the index
  // A free slot (reused: its floats hold an old row), or a new one (a new block when the last is
  // full; its floats are zero).
  std::pair<Slot, bool> take_slot();

  std::size_t row_floats_ = 0;
  unsigned first_shift_ = 0;         // log2 of the first block's rows
  std::size_t growing_blocks_ = 0;   // blocks before the first big one
  unsigned big_shift_ = 0;           // log2 of a big block's rows
  std::size_t capacity_ = 0;         // rows in the blocks so far
  struct GiveBack {
    std::size_t bytes = 0;
    void operator()(float* p) const;
  };
  std::vector<std::unique_ptr<float[], GiveBack>> blocks_;
  std::vector<SlotInfo> slots_;
  std::vector<Slot> free_;
  std::vector<Entry> index_;   // a power of two long, at most half full
  unsigned shift_ = 64;
  std::size_t size_ = 0;
};

}  // namespace pw::dp
