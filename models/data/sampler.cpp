#include "models/data/sampler.h"

#include <numeric>

#include "core/error.h"
#include "models/rng.h"

namespace pw::models::data {

void check_shard(const Shard& shard) {
  PW_INPUT_CHECK(shard.count >= 1 && shard.index >= 0 && shard.index < shard.count,
                 "data shard " << shard.index << " of " << shard.count
                               << " is not valid; expected a shard count >= 1 and 0 <= index < count");
}

std::vector<std::int64_t> epoch_order(std::int64_t size, Shuffle shuffle, std::uint64_t seed, std::int64_t epoch) {
  PW_CHECK(size >= 0, "negative data set size " << size);
  std::vector<std::int64_t> order(static_cast<std::size_t>(size));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  if (shuffle == Shuffle::No) return order;
  Rng rng(splitmix64(seed) ^ splitmix64(0xE9C0000000000000ULL + static_cast<std::uint64_t>(epoch)));
  for (std::int64_t i = size - 1; i > 0; --i) {
    // Lemire's multiply-shift maps 64 random bits onto [0, i] without a division.
    const auto j = static_cast<std::int64_t>(
        (static_cast<unsigned __int128>(rng.next_u64()) * static_cast<std::uint64_t>(i + 1)) >> 64);
    std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(j)]);
  }
  return order;
}

SliceBounds shard_slice(std::int64_t size, const Shard& shard) {
  check_shard(shard);
  return {size * shard.index / shard.count, size * (shard.index + 1) / shard.count};
}

std::vector<std::int64_t> shard_epoch_indices(std::int64_t size, Shuffle shuffle, std::uint64_t seed,
                                              std::int64_t epoch, const Shard& shard) {
  const SliceBounds bounds = shard_slice(size, shard);
  auto order = epoch_order(size, shuffle, seed, epoch);
  return {order.begin() + bounds.begin, order.begin() + bounds.end};
}

}  // namespace pw::models::data
