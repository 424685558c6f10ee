#include "dataparallel/bucket_reducer.h"

#include <algorithm>

#include "core/clock.h"
#include "core/error.h"
#include "core/trace.h"
#include "kernels/ops/elementwise.h"

namespace pw::dp {

BucketReducer::BucketReducer(std::vector<models::Parameter*> parameters, Collective& collective,
                             BucketOptions options, TraceTrack track)
    : collective_(collective), options_(options), track_(track) {
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
  for (auto& b : buckets_) {
    stats_.bytes += b.elements * static_cast<std::int64_t>(sizeof(float));
    b.flat = kernels::Tensor::empty({b.elements}, kernels::DType::F32, b.parameters.front()->grad.device());
    std::int64_t at = 0;
    for (auto* p : b.parameters) {
      PW_CHECK(p->grad.device() == b.flat.device(), "gradients of one stage on two devices");
      auto home = b.flat.view(at, p->grad.shape());
      home.copy_from(p->grad);
      p->grad = home;
      at += home.numel();
    }
  }
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
    const auto step = step_;
    const auto index = static_cast<int>(next_);
    lock.unlock();
    const auto t0 = Clock::now();
    std::exception_ptr failed;
    try {
      // micro_batch holds the bucket's index in the trace.
      trace::ScopedSpan span(trace::SpanKind::AllReduce, track_.stage, track_.replica, step, index, 0, 1);
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
  // Someone may have replaced a gradient tensor (a checkpoint load, a test): bring it home.
  std::int64_t at = 0;
  for (auto* p : bucket.parameters) {
    if (p->grad.raw() != static_cast<float*>(bucket.flat.raw()) + at) {
      auto home = bucket.flat.view(at, p->grad.shape());
      home.copy_from(p->grad);
      p->grad = home;
    }
    at += p->grad.numel();
  }
  collective_.allreduce_sum(bucket.flat, options_.compression);
  const float mean = 1.0f / static_cast<float>(collective_.size());
  if (bucket.flat.device().is_cpu()) {
    // A plain loop on this thread: an OpenMP team here would spin against the stage threads.
    float* v = bucket.flat.data<float>();
    for (std::int64_t i = 0; i < bucket.elements; ++i) v[i] *= mean;
  } else {
    kernels::scale_inplace(bucket.flat, mean);
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
