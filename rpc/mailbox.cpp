#include "rpc/mailbox.h"

namespace pw::rpc {

Mailbox::Key Mailbox::key(int source, const Tag& tag) {
  return {source, tag.step, tag.micro_batch, static_cast<int>(tag.kind), tag.virtual_stage};
}

PostOutcome Mailbox::post(int source, const Tag& tag, kernels::Tensor tensor) {
  {
    std::lock_guard lock(mutex_);
    if (aborted_) return PostOutcome::Aborted;
    if (!messages_.emplace(key(source, tag), std::move(tensor)).second) return PostOutcome::Duplicate;
  }
  arrived_.notify_all();
  return PostOutcome::Stored;
}

kernels::Tensor Mailbox::take(int source, const Tag& tag, Deadline deadline) {
  std::unique_lock lock(mutex_);
  const Key k = key(source, tag);
  while (true) {
    if (aborted_) throw AbortedError(*aborted_);
    if (auto it = messages_.find(k); it != messages_.end()) {
      kernels::Tensor tensor = std::move(it->second);
      messages_.erase(it);
      return tensor;
    }
    if (arrived_.wait_until(lock, deadline) == std::cv_status::timeout && !aborted_ && messages_.count(k) == 0)
      throw TimeoutError("rank " + std::to_string(owner_rank_) + " timed out waiting for the " + tag_str(tag) +
                         " from rank " + std::to_string(source));
  }
}

void Mailbox::abort(const std::string& reason) {
  {
    std::lock_guard lock(mutex_);
    if (!aborted_) aborted_ = reason;
  }
  arrived_.notify_all();
}

std::optional<std::string> Mailbox::abort_reason() const {
  std::lock_guard lock(mutex_);
  return aborted_;
}

void Mailbox::reset() {
  std::lock_guard lock(mutex_);
  aborted_.reset();
  messages_.clear();
}

std::size_t Mailbox::waiting_messages() const {
  std::lock_guard lock(mutex_);
  return messages_.size();
}

}  // namespace pw::rpc
