#include "dataparallel/ps_row_cache.h"

#include <algorithm>

#include "core/error.h"

namespace pw::dp {

RowCache::RowCache(int dim, std::int64_t capacity) : dim_(dim), capacity_(capacity) {
  PW_INPUT_CHECK(dim >= 1, "row cache: row width " << dim << "; expected >= 1");
  PW_INPUT_CHECK(capacity >= 0, "row cache of " << capacity << " rows; expected >= 0");
}

bool RowCache::lookup(std::int64_t key, std::int64_t oldest_step, float* out) {
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.step < oldest_step) {
    ++misses_;
    return false;
  }
  std::copy(it->second.row.begin(), it->second.row.end(), out);
  recency_.splice(recency_.begin(), recency_, it->second.recency);
  ++hits_;
  return true;
}

void RowCache::insert(std::int64_t key, std::int64_t step, const float* row) {
  if (capacity_ == 0) return;
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    if (static_cast<std::int64_t>(entries_.size()) >= capacity_) {
      // The least recently used entry makes room, and lends its row buffer to the new key.
      auto node = entries_.extract(recency_.back());
      recency_.pop_back();
      recency_.push_front(key);
      node.key() = key;
      node.mapped().step = step;
      node.mapped().recency = recency_.begin();
      it = entries_.insert(std::move(node)).position;
    } else {
      recency_.push_front(key);
      it = entries_.emplace(key, Entry{step, std::vector<float>(static_cast<std::size_t>(dim_)), recency_.begin()}).first;
    }
  } else {
    it->second.step = step;
    recency_.splice(recency_.begin(), recency_, it->second.recency);
  }
  std::copy(row, row + dim_, it->second.row.begin());
}

void RowCache::clear() {
  entries_.clear();
  recency_.clear();
}

}  // namespace pw::dp
