#pragma once
// The receiving side of one rank: tensors that arrived from peers, keyed by (source rank, tag),
// waited for with a deadline. Same semantics as InProcessHub, for one destination.
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>

#include "rpc/transport.h"

namespace pw::rpc {

enum class PostOutcome { Stored, Duplicate, Aborted };

class Mailbox {
 public:
  explicit Mailbox(int owner_rank) : owner_rank_(owner_rank) {}

  PostOutcome post(int source, const Tag& tag, kernels::Tensor tensor);
  // Throws TimeoutError naming this rank, the source and the tag; AbortedError after abort().
  kernels::Tensor take(int source, const Tag& tag, Deadline deadline);
  void abort(const std::string& reason);
  std::optional<std::string> abort_reason() const;
  std::size_t waiting_messages() const;
  void reset();   // clears an abort and any undelivered messages (between jobs or steps)

 private:
  using Key = std::tuple<int, std::int64_t, int, int, int>;
  static Key key(int source, const Tag& tag);

  int owner_rank_;
  mutable std::mutex mutex_;
  std::condition_variable arrived_;
  std::map<Key, kernels::Tensor> messages_;
  std::optional<std::string> aborted_;
};

}  // namespace pw::rpc
