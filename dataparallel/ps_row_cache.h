#pragma once
// A worker's cache of embedding rows pulled from the parameter servers, so hot rows (a Zipf
// workload's head) are not pulled again every micro-batch. Each row remembers the step it was
// pulled at; a lookup for step t accepts it only if it was pulled at step >= t - window, so the
// rows a worker computes with are never more than `window` steps older than a fresh pull would
// be. Capacity-bounded; the least recently used row goes first. Not thread-safe (one per layer).
#include <cstdint>
#include <list>
#include <unordered_map>
#include <vector>

namespace pw::dp {

class RowCache {
 public:
  RowCache(int dim, std::int64_t capacity);

  // Copies key's row into out[dim] when it is cached and pulled at step >= oldest_step.
  bool lookup(std::int64_t key, std::int64_t oldest_step, float* out);
  void insert(std::int64_t key, std::int64_t step, const float* row);
  void clear();

  std::int64_t capacity() const { return capacity_; }
  std::int64_t size() const { return static_cast<std::int64_t>(entries_.size()); }
  std::int64_t hits() const { return hits_; }
  std::int64_t misses() const { return misses_; }

 private:
  struct Entry {
    std::int64_t step = 0;
    std::vector<float> row;
    std::list<std::int64_t>::iterator recency;
  };
  int dim_;
  std::int64_t capacity_;
  std::unordered_map<std::int64_t, Entry> entries_;
  std::list<std::int64_t> recency_;   // front: most recently used
  std::int64_t hits_ = 0, misses_ = 0;
};

}  // namespace pw::dp
