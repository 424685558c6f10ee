#pragma once
// One cancellation token per world: every blocking wait of the job (transports, collectives,
// gradient reducers, the rank threads' own waits) subscribes, and cancelling the token wakes them
// all with the reason. Replaces per-object abort() calls scattered through the job code.
#include <cstddef>
#include <functional>
#include <map>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>

namespace pw::train {

class CancelToken {
 public:
  using Listener = std::function<void(const std::string& reason)>;

  // A listener added after cancel() runs at once. Returns the id unsubscribe() takes.
  std::size_t subscribe(Listener listener);
  // Once it returns, the listener is not running and will not run: what it points at may go.
  // (A listener must not unsubscribe itself.)
  void unsubscribe(std::size_t id);
  // The first reason wins; later calls do nothing. Listeners run on the calling thread, outside
  // the token's lock (they may take their own locks).
  void cancel(const std::string& reason);
  bool cancelled() const;
  std::string reason() const;
  // Makes the token usable again (listeners stay subscribed): a world of threads that recovers
  // from a failed step. The subscribers must have been reset themselves.
  void reset();

 private:
  mutable std::mutex mutex_;
  std::map<std::size_t, Listener> listeners_;
  std::set<std::size_t> running_;   // listeners being called by cancel()
  std::condition_variable finished_;
  std::size_t next_id_ = 0;
  bool cancelled_ = false;
  std::string reason_;
};

// Unsubscribes on destruction (RAII for a listener whose target dies before the token).
class CancelSubscription {
 public:
  CancelSubscription() = default;
  CancelSubscription(CancelToken& token, CancelToken::Listener listener)
      : token_(&token), id_(token.subscribe(std::move(listener))) {}
  ~CancelSubscription() { reset(); }
  CancelSubscription(CancelSubscription&& o) noexcept : token_(o.token_), id_(o.id_) { o.token_ = nullptr; }
  CancelSubscription& operator=(CancelSubscription&& o) noexcept {
    if (this != &o) {
      reset();
      token_ = o.token_;
      id_ = o.id_;
      o.token_ = nullptr;
    }
    return *this;
  }
  void reset() {
    if (token_ != nullptr) token_->unsubscribe(id_);
    token_ = nullptr;
  }

 private:
  CancelToken* token_ = nullptr;
  std::size_t id_ = 0;
};

}  // namespace pw::train
