#pragma once
// Which sample indices one data-parallel replica reads in one epoch, and in what order.
#include <cstdint>
#include <vector>

namespace pw::models::data {

enum class Shuffle { No, Yes };

// Replica `index` of `count` reads a disjoint slice of each epoch's order; the slices cover it.
struct Shard {
  int index = 0;
  int count = 1;
};

// Throws InputError unless 0 <= index < count.
void check_shard(const Shard& shard);

// The whole epoch's order: 0..size-1, or with Shuffle::Yes a permutation that depends only on
// (seed, epoch), computed by our own Fisher-Yates so it is the same on every platform and build.
std::vector<std::int64_t> epoch_order(std::int64_t size, Shuffle shuffle, std::uint64_t seed, std::int64_t epoch);

// [begin, end) of `shard`'s contiguous slice of an epoch of `size` samples. Slice sizes differ by
// at most one: size / count, or one more.
struct SliceBounds {
  std::int64_t begin = 0;
  std::int64_t end = 0;
};
SliceBounds shard_slice(std::int64_t size, const Shard& shard);

// The indices `shard` reads in `epoch`, in order.
std::vector<std::int64_t> shard_epoch_indices(std::int64_t size, Shuffle shuffle, std::uint64_t seed,
                                              std::int64_t epoch, const Shard& shard);

}  // namespace pw::models::data
