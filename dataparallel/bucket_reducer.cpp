#include "dataparallel/bucket_reducer.h"

#include <algorithm>

#include "core/clock.h"
#include "core/error.h"
#include "kernels/ops/elementwise.h"

namespace pw::dp {

BucketReducer::BucketReducer(std::vector<models::Parameter*> parameters, Collective& collective,
                             BucketOptions options)
    : collective_(collective), options_(options) {
  PW_INPUT_CHECK(options_.bucket_bytes > 0, "the gradient bucket size must be positive");
  // Backward finishes the last layers first, so buckets are filled from the end.
  std::reverse(parameters.begin(), parameters.end());
  for (auto* p : parameters) {
    PW_CHECK(p->grad.dtype() == kernels::DType::F32, "gradient of '" << p->name << "' is " << p->grad.describe()
                                                                     << "; buckets hold F32");
    if (buckets_.empty() || static_cast<std::size_t>(buckets_.back().elements) * sizeof(float) >= options_.bucket_bytes)
      buckets_.emplace_back();
    buckets_.back().parameters.push_back(p);
    buckets_.back().elements += p->grad.numel();
    bucket_of_[p] = buckets_.size() - 1;
  }
  for (const auto& b : buckets_) stats_.bytes += b.elements * static_cast<std::int64_t>(sizeof(float));
  stats_.buckets = static_cast<std::int64_t>(buckets_.size());
  next_ = buckets_.size();   // nothing to do before the first step
  worker_ = std::thread([this] { work(); });
}

BucketReducer::~BucketReducer() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  worker_.join();
}

void BucketReducer::start_step(std::int64_t step) {
  std::lock_guard lock(mutex_);
  PW_CHECK(next_ == buckets_.size() || step_ < 0, "a step started before the last one's gradients were reduced");
  step_ = step;
  next_ = 0;
  error_ = nullptr;
  aborted_.reset();
  stats_.reduce_seconds = 0.0;
  stats_.exposed_seconds = 0.0;
  seen_.clear();
  for (auto& b : buckets_) {
    b.pending = static_cast<int>(b.parameters.size());
    b.reduced = false;
  }
}

void BucketReducer::ready(models::Parameter* parameter) {
  std::lock_guard lock(mutex_);
  auto it = bucket_of_.find(parameter);
  if (it == bucket_of_.end() || seen_[parameter]) return;
  seen_[parameter] = true;
  if (--buckets_[it->second].pending == 0) changed_.notify_all();
}

void BucketReducer::work() {
  std::unique_lock lock(mutex_);
  while (true) {
    changed_.wait(lock, [&] {
      return stopping_ || (next_ < buckets_.size() && !aborted_ && !error_ && buckets_[next_].pending == 0);
    });
    if (stopping_) return;
    Bucket& bucket = buckets_[next_];
    lock.unlock();
    const auto t0 = Clock::now();
    std::exception_ptr failed;
    try {
      reduce(bucket);
    } catch (...) {
      failed = std::current_exception();
    }
    lock.lock();
    stats_.reduce_seconds += seconds_since(t0);
    if (failed) error_ = failed;
    else {
      bucket.reduced = true;
      ++next_;
    }
    changed_.notify_all();
  }
}

void BucketReducer::reduce(Bucket& bucket) {
  const auto device = bucket.parameters.front()->grad.device();
  auto flat = kernels::Tensor::empty({bucket.elements}, kernels::DType::F32, device);
  std::int64_t at = 0;
  for (auto* p : bucket.parameters) {
    flat.copy_elements_from(p->grad, 0, at, p->grad.numel());
    at += p->grad.numel();
  }
  collective_.allreduce_sum(flat, options_.compression);
  kernels::scale_inplace(flat, 1.0 / static_cast<double>(collective_.size()));
  at = 0;
  for (auto* p : bucket.parameters) {
    p->grad.copy_elements_from(flat, at, 0, p->grad.numel());
    at += p->grad.numel();
  }
}

void BucketReducer::finish(rpc::Deadline deadline) {
  const auto t0 = Clock::now();
  std::unique_lock lock(mutex_);
  // Gradients the hooks did not report (a parameter outside every child) are final by now.
  for (auto& b : buckets_) b.pending = 0;
  changed_.notify_all();
  const bool done = changed_.wait_until(lock, deadline, [&] { return next_ == buckets_.size() || error_ || aborted_; });
  stats_.exposed_seconds = seconds_since(t0);
  if (aborted_) throw rpc::AbortedError(*aborted_);
  if (error_) std::rethrow_exception(error_);
  if (!done)
    throw rpc::TimeoutError("replica " + std::to_string(collective_.rank()) + " of " +
                            std::to_string(collective_.size()) + ": the gradient all-reduce of bucket " +
                            std::to_string(next_) + " of " + std::to_string(buckets_.size()) +
                            " did not finish before the deadline");
}

void BucketReducer::abort(const std::string& reason) {
  {
    std::lock_guard lock(mutex_);
    if (!aborted_) aborted_ = reason;
  }
  changed_.notify_all();
}

ReduceStats BucketReducer::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace pw::dp
