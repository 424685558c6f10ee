#pragma once
// Assembles batches 0..count-1 on a background thread, up to `depth` ahead of the consumer, through
// a oneTBB bounded queue. Destroying it mid-way cancels the batch being built, drains the queue so
// a blocked push returns, and joins the thread: it never hangs and leaks nothing.
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <optional>
#include <thread>

#include <oneapi/tbb/concurrent_queue.h>
#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/task_group.h>

#include "models/data/dataset.h"

namespace pw::models::data {

class BatchPrefetcher {
 public:
  // Builds batch `index`; parallel work inside must run under `context` so that it can be cancelled.
  using MakeBatch = std::function<Batch(std::int64_t index, tbb::task_group_context& context)>;

  // With `arena`, the batches are built in it (a pool of the loader's own, so decoding takes at
  // most that share of the machine); without, in the process's default arena. The arena must
  // outlive the prefetcher.
  BatchPrefetcher(std::int64_t count, int depth, MakeBatch make, tbb::task_arena* arena = nullptr);
  ~BatchPrefetcher();
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  // The next batch in index order; nullopt after the last. Rethrows what building a batch threw.
  std::optional<Batch> next();

 private:
  struct Slot {
    std::optional<Batch> batch;   // empty with no error: the end
    std::exception_ptr error;
  };

  void produce() noexcept;

  std::int64_t count_;
  MakeBatch make_;
  tbb::task_arena* arena_;
  tbb::concurrent_bounded_queue<Slot> queue_;
  tbb::task_group_context context_{tbb::task_group_context::isolated};
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> producer_done_{false};
  bool finished_ = false;   // consumer side: the end or an error was seen
  std::thread producer_;
};

}  // namespace pw::models::data
