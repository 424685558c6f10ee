#pragma once
// Transport between threads of one process: a hub of mailboxes keyed by (source, destination,
// tag). Sends never block; receives wait on a condition variable until the message or the deadline.
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>

#include "rpc/transport.h"

namespace pw::rpc {

class InProcessHub {
 public:
  explicit InProcessHub(int world_size);
  std::unique_ptr<Transport> endpoint(int rank);
  int world_size() const { return world_size_; }

  void post(int from, int to, const Tag& tag, const kernels::Tensor& tensor);
  kernels::Tensor take(int from, int to, const Tag& tag, Deadline deadline);
  void abort(const std::string& reason);
  void reset();   // clears an abort and any undelivered messages (between jobs)

 private:
  using Key = std::tuple<int, int, std::int64_t, int, int, int>;
  static Key key(int from, int to, const Tag& tag);

  int world_size_;
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::map<Key, kernels::Tensor> mailbox_;
  std::optional<std::string> aborted_;
};

}  // namespace pw::rpc
