#include "dataparallel/ps/row_store.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <new>

#include "core/error.h"
#include "core/host_block_pool.h"

namespace pw::dp {

namespace {
constexpr std::size_t kFirstBlockBytes = std::size_t{16} << 10;
constexpr std::size_t kBigBlockBytes = std::size_t{2} << 20;
constexpr std::size_t kFirstIndex = 16;
}  // namespace

void RowStore::reset(std::size_t row_floats) {
  row_floats_ = std::max<std::size_t>(row_floats, 1);
  const std::size_t row_bytes = row_floats_ * sizeof(float);
  const std::size_t first_rows = std::bit_floor(std::max<std::size_t>(1, kFirstBlockBytes / row_bytes));
  first_shift_ = static_cast<unsigned>(std::countr_zero(first_rows));
  // Big blocks: the fewest rows (a power of two) that fill at least 2 MiB.
  big_shift_ = first_shift_;
  while ((std::size_t{1} << big_shift_) * row_bytes < kBigBlockBytes) ++big_shift_;
  growing_blocks_ = big_shift_ - first_shift_;
  capacity_ = 0;
  blocks_.clear();
  slots_.clear();
  free_.clear();
  index_.clear();
  shift_ = 64;
  size_ = 0;
}

RowStore::Slot RowStore::find(std::int64_t key) const {
  if (index_.empty()) return kNone;
  const std::size_t mask = index_.size() - 1;
  for (std::size_t i = home(key);; i = (i + 1) & mask) {
    const Entry& e = index_[i];
    if (e.slot == kNone) return kNone;
    if (e.key == key) return e.slot;
  }
}

std::pair<RowStore::Slot, bool> RowStore::insert(std::int64_t key) {
  if (2 * (size_ + 1) > index_.size()) {
    if (const Slot s = find(key); s != kNone) return {s, false};   // stored: no room needed
    grow();
  }
  const std::size_t mask = index_.size() - 1;
  std::size_t i = home(key);
  for (; index_[i].slot != kNone; i = (i + 1) & mask)
    if (index_[i].key == key) return {index_[i].slot, false};
  const auto [s, reused] = take_slot();
  SlotInfo& info = slots_[s];
  info.key = key;
  info.steps = 0;
  info.recency = {};
  info.live = true;
  if (reused) std::memset(values(s), 0, row_floats_ * sizeof(float));
  index_[i] = {key, s};
  ++size_;
  return {s, true};
}

bool RowStore::erase(std::int64_t key) {
  if (index_.empty()) return false;
  const std::size_t mask = index_.size() - 1;
  std::size_t hole = home(key);
  for (; index_[hole].key != key || index_[hole].slot == kNone; hole = (hole + 1) & mask)
    if (index_[hole].slot == kNone) return false;
  const Slot s = index_[hole].slot;
  slots_[s].live = false;
  free_.push_back(s);
  --size_;
  // Backward shift: an entry further along the run moves into the hole unless the hole lies
  // before its home position (cyclically), which it would then no longer be found from.
  for (std::size_t j = (hole + 1) & mask; index_[j].slot != kNone; j = (j + 1) & mask) {
    const std::size_t h = home(index_[j].key);
    if (((j - h) & mask) >= ((j - hole) & mask)) {
      index_[hole] = index_[j];
      hole = j;
    }
  }
  index_[hole].slot = kNone;
  return true;
}

void RowStore::grow() {
  const std::size_t capacity = index_.empty() ? kFirstIndex : 2 * index_.size();
  PW_CHECK(capacity / 2 <= kNone, "a lock stripe of a parameter-server table holds more than " << kNone << " rows");
  std::vector<Entry> old = std::move(index_);
  index_.assign(capacity, Entry{0, kNone});
  shift_ = 64 - static_cast<unsigned>(__builtin_ctzll(capacity));
  const std::size_t mask = capacity - 1;
  for (const Entry& e : old) {
    if (e.slot == kNone) continue;
    std::size_t i = home(e.key);
    while (index_[i].slot != kNone) i = (i + 1) & mask;
    index_[i] = e;
  }
}

std::pair<RowStore::Slot, bool> RowStore::take_slot() {
  if (!free_.empty()) {
    const Slot s = free_.back();
    free_.pop_back();
    return {s, true};
  }
  const auto s = static_cast<Slot>(slots_.size());
  if (slots_.size() == capacity_) {
    const std::size_t rows = rows_of_block(blocks_.size());
    const std::size_t bytes = rows * row_floats_ * sizeof(float);
    std::unique_ptr<float[], GiveBack> block(static_cast<float*>(HostBlockPool::shared().take(bytes)),
                                             GiveBack{bytes});   // owned before push_back may throw
    blocks_.push_back(std::move(block));
    capacity_ += rows;
  }
  slots_.emplace_back();
  return {s, false};
}

void RowStore::GiveBack::operator()(float* p) const { HostBlockPool::shared().give_back(p, bytes); }

}  // namespace pw::dp
