#include "rpc/mailbox.h"

#include <algorithm>

namespace pw::rpc {

Mailbox::Key Mailbox::key(int source, const Tag& tag) {
  return {source, tag.step, tag.micro_batch, static_cast<int>(tag.kind), tag.virtual_stage};
}

std::optional<std::string> Mailbox::refusal_locked(int source, const Tag& tag) const {
  if (!is_pipeline_kind(tag.kind) || !turns_on()) return std::nullopt;
  const std::int64_t live = *live_step_;
  const std::string what = "rank " + std::to_string(source) + " sent the " + tag_str(tag) + " out of turn: ";
  const std::string on = "rank " + std::to_string(owner_rank_) + " is on step " + std::to_string(live);
  if (expected_.count({source, tag.micro_batch, static_cast<int>(tag.kind), tag.virtual_stage}) == 0)
    return what + "rank " + std::to_string(owner_rank_) + "'s program takes no such frame from rank " +
           std::to_string(source);
  if (tag.step < live) return what + "that step is over (" + on + ")";
  if (tag.step > live + 1)
    return what + "that step is ahead of its turn (" + on + " and takes frames of steps " + std::to_string(live) +
           " and " + std::to_string(live + 1) + " only)";
  const Key k = key(source, tag);
  if (taken_.count(k) != 0 || messages_.count(k) != 0) return what + "it came a second time in that step";
  return std::nullopt;
}

std::optional<std::string> Mailbox::out_of_turn(int source, const Tag& tag) const {
  std::lock_guard lock(mutex_);
  return refusal_locked(source, tag);
}

PostOutcome Mailbox::post(int source, const Tag& tag, kernels::Tensor tensor, std::string* why) {
  {
    std::lock_guard lock(mutex_);
    if (aborted_ || failed_) return PostOutcome::Aborted;
    if (auto refused = refusal_locked(source, tag)) {
      if (why != nullptr) *why = std::move(*refused);
      return PostOutcome::OutOfTurn;
    }
    if (!messages_.emplace(key(source, tag), std::move(tensor)).second) {
      if (why != nullptr)
        *why = "duplicate frame: the " + tag_str(tag) + " from rank " + std::to_string(source) +
               " arrived before and was not yet received";
      return PostOutcome::Duplicate;
    }
  }
  arrived_.notify_all();
  return PostOutcome::Stored;
}

kernels::Tensor Mailbox::take(int source, const Tag& tag, Deadline deadline) {
  std::unique_lock lock(mutex_);
  const Key k = key(source, tag);
  while (true) {
    if (failed_) throw ProtocolError(*failed_);
    if (aborted_) throw AbortedError(*aborted_);
    if (auto it = messages_.find(k); it != messages_.end()) {
      kernels::Tensor tensor = std::move(it->second);
      messages_.erase(it);
      if (is_pipeline_kind(tag.kind) && turns_on()) taken_.insert(k);
      return tensor;
    }
    if (arrived_.wait_until(lock, deadline) == std::cv_status::timeout && !aborted_ && !failed_ &&
        messages_.count(k) == 0)
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

void Mailbox::fail(const std::string& reason) {
  {
    std::lock_guard lock(mutex_);
    if (!failed_) failed_ = reason;
  }
  arrived_.notify_all();
}

std::optional<std::string> Mailbox::abort_reason() const {
  std::lock_guard lock(mutex_);
  if (failed_) return failed_;
  return aborted_;
}

void Mailbox::reset() {
  std::lock_guard lock(mutex_);
  aborted_.reset();
  failed_.reset();
  messages_.clear();
  taken_.clear();
  live_step_.reset();
}

void Mailbox::expect(const std::vector<ExpectedFrame>& frames) {
  std::lock_guard lock(mutex_);
  expected_.clear();
  for (const auto& f : frames)
    if (is_pipeline_kind(f.kind)) expected_.insert({f.peer, f.micro_batch, static_cast<int>(f.kind), f.virtual_stage});
}

void Mailbox::begin_step(std::int64_t step) {
  std::lock_guard lock(mutex_);
  // A restore to this step or an earlier one (a rollback) replays step numbers: what was taken
  // before is forgotten.
  if (live_step_ && step <= *live_step_) taken_.clear();
  live_step_ = step;
  const auto over = [&](const Key& k) {
    const auto s = std::get<1>(k);
    return is_pipeline_kind(static_cast<PayloadKind>(std::get<3>(k))) && (s < step || s > step + 1);
  };
  std::erase_if(messages_, [&](const auto& entry) { return over(entry.first); });
  std::erase_if(taken_, over);
}

std::size_t Mailbox::waiting_messages() const {
  std::lock_guard lock(mutex_);
  return messages_.size();
}

}  // namespace pw::rpc
