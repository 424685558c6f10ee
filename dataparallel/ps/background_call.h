#pragma once
// One parameter-server call run on its own thread while the caller goes on (a prefetched pull, a
// push that leaves without waiting). The call itself is bounded by its client's deadline; `take`
// waits for it with a deadline of its own and rethrows what it threw. A call can be abandoned (a
// job rolled back, the rows are no longer wanted): its thread is parked and joined later, so
// dropping it never blocks the caller.
#include <chrono>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"
#include "rpc/transport.h"

namespace pw::dp {

template <typename T>
class BackgroundCall {
 public:
  BackgroundCall() = default;
  explicit BackgroundCall(std::function<T()> call) {
    std::packaged_task<T()> task(std::move(call));
    result_ = task.get_future();
    thread_ = std::thread(std::move(task));
  }
  BackgroundCall(BackgroundCall&&) noexcept = default;
  BackgroundCall& operator=(BackgroundCall&& other) noexcept {
    if (this != &other) {
      if (thread_.joinable()) thread_.join();
      result_ = std::move(other.result_);
      thread_ = std::move(other.thread_);
    }
    return *this;
  }
  ~BackgroundCall() {
    if (thread_.joinable()) thread_.join();
  }

  bool pending() const { return result_.valid(); }
  bool ready() const {
    return result_.valid() && result_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  }

  // The call's result (or its exception); rpc::TimeoutError saying `what` if it has not
  // finished by `deadline`.
  T take(std::chrono::steady_clock::time_point deadline, const std::string& what) {
    PW_CHECK(result_.valid(), "" << what << ": no call in flight");
    if (result_.wait_until(deadline) != std::future_status::ready)
      throw rpc::TimeoutError(what + ": the background call did not finish by its deadline");
    thread_.join();
    return result_.get();
  }

  // Forgets the call; its thread goes to `parked` for the owner to join when it ends.
  void abandon(std::vector<std::thread>& parked) {
    result_ = std::future<T>();
    if (thread_.joinable()) parked.push_back(std::move(thread_));
  }

 private:
  std::future<T> result_;
  std::thread thread_;
};

}  // namespace pw::dp
