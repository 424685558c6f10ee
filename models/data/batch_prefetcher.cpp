#include "models/data/batch_prefetcher.h"

#include <chrono>

#include "core/error.h"

namespace pw::models::data {

BatchPrefetcher::BatchPrefetcher(std::int64_t count, int depth, MakeBatch make, tbb::task_arena* arena)
    : count_(count), make_(std::move(make)), arena_(arena) {
  PW_CHECK(depth >= 1, "prefetch depth " << depth << " must be at least 1");
  queue_.set_capacity(depth);
  producer_ = std::thread([this] { produce(); });
}

BatchPrefetcher::~BatchPrefetcher() {
  cancelled_.store(true);
  context_.cancel_group_execution();
  // The producer checks cancelled_ between batches; a push blocked on a full queue returns once
  // we take something out, so keep draining until it has left.
  Slot discarded;
  while (!producer_done_.load()) {
    while (queue_.try_pop(discarded)) {
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  producer_.join();
}

void BatchPrefetcher::produce() noexcept {
  const auto build_all = [this] {
    for (std::int64_t i = 0; i < count_ && !cancelled_.load(); ++i) {
      Batch batch = make_(i, context_);
      if (cancelled_.load()) break;   // a cancelled batch may be partly filled
      queue_.push(Slot{std::move(batch), nullptr});
    }
  };
  try {
    if (arena_ != nullptr) arena_->execute(build_all);
    else build_all();
    if (!cancelled_.load()) queue_.push(Slot{});
  } catch (...) {
    // Should this push itself fail (out of memory), noexcept ends the process rather than leave
    // the consumer waiting forever.
    if (!cancelled_.load()) queue_.push(Slot{std::nullopt, std::current_exception()});
  }
  producer_done_.store(true);
}

std::optional<Batch> BatchPrefetcher::next() {
  if (finished_) return std::nullopt;
  Slot slot;
  queue_.pop(slot);
  if (slot.batch) return std::move(slot.batch);
  finished_ = true;
  if (slot.error) std::rethrow_exception(slot.error);
  return std::nullopt;
}

}  // namespace pw::models::data
