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
  std::unique_lock lock(mutex_);
  listeners_.erase(id);
  finished_.wait(lock, [&] { return running_.count(id) == 0; });
}

// Each listener is looked up again just before it runs, so one unsubscribed meanwhile is skipped,
// and it is marked running, so that unsubscribe() waits for it.
void CancelToken::cancel(const std::string& reason) {
  std::vector<std::size_t> ids;
  {
    std::lock_guard lock(mutex_);
    if (cancelled_) return;
    cancelled_ = true;
    reason_ = reason;
    for (const auto& [id, listener] : listeners_) ids.push_back(id);
  }
  for (std::size_t id : ids) {
    Listener listener;
    {
      std::lock_guard lock(mutex_);
      const auto it = listeners_.find(id);
      if (it == listeners_.end()) continue;
      listener = it->second;
      running_.insert(id);
    }
    try {
      listener(reason);
    } catch (...) {
      // A listener that cannot abort its wait leaves it to its deadline; the others still run.
    }
    {
      std::lock_guard lock(mutex_);
      running_.erase(id);
    }
    finished_.notify_all();
  }
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
