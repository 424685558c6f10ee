#include "train/cancel_token.h"

#include <vector>

namespace pw::train {

std::size_t CancelToken::subscribe(Listener listener) {
  std::unique_lock lock(mutex_);
  const std::size_t id = next_id_++;
  if (cancelled_) {
    const std::string reason = reason_;
    lock.unlock();
    listener(reason);
    return id;
  }
  listeners_.emplace(id, std::move(listener));
  return id;
}

void CancelToken::unsubscribe(std::size_t id) {
  std::lock_guard lock(mutex_);
  listeners_.erase(id);
}

void CancelToken::cancel(const std::string& reason) {
  std::map<std::size_t, Listener> listeners;
  {
    std::lock_guard lock(mutex_);
    if (cancelled_) return;
    cancelled_ = true;
    reason_ = reason;
    listeners = listeners_;
  }
  for (auto& [id, listener] : listeners) listener(reason);
}

void CancelToken::reset() {
  std::lock_guard lock(mutex_);
  cancelled_ = false;
  reason_.clear();
}

bool CancelToken::cancelled() const {
  std::lock_guard lock(mutex_);
  return cancelled_;
}

std::string CancelToken::reason() const {
  std::lock_guard lock(mutex_);
  return reason_;
}

}  // namespace pw::train
