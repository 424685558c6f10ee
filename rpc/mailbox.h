#pragma once
// The receiving side of one rank: tensors that arrived from peers, keyed by (source rank, tag),
// waited for with a deadline. Same semantics as InProcessHub, for one destination.
//
// Turns. Once told which pipeline frames (activations, gradients, tied gradients) its program
// takes in a step (expect) and which step it is on (begin_step), the mailbox admits such a frame
// only when it is one the program takes, for this step or the next, and not already stored or
// taken in that step; it drops what it holds for steps that are over. So a frame sent out of
// turn (for a future step, a step that is over, or twice) is never used as the real one and
// never piles up: the caller refuses it and ends the job (fail()), naming the sender.
#include <condition_variable>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "rpc/transport.h"

namespace pw::rpc {

enum class PostOutcome { Stored, Duplicate, OutOfTurn, Aborted };

// A frame a rank refused as out of turn ended the job: bad input from the network (status 2).
class ProtocolError : public InputError {
 public:
  using InputError::InputError;
};

class Mailbox {
 public:
  explicit Mailbox(int owner_rank) : owner_rank_(owner_rank) {}

  // Stored, or why not; `why` (when given) receives the reason for Duplicate and OutOfTurn.
  PostOutcome post(int source, const Tag& tag, kernels::Tensor tensor, std::string* why = nullptr);
  // Why a frame with this header would be refused as out of turn, before its bytes are read.
  std::optional<std::string> out_of_turn(int source, const Tag& tag) const;
  // Throws TimeoutError naming this rank, the source and the tag; AbortedError after abort();
  // ProtocolError after fail().
  kernels::Tensor take(int source, const Tag& tag, Deadline deadline);
  void abort(const std::string& reason);
  // Ends this rank's receiving with a protocol error (a peer broke the protocol): pending and
  // later takes throw ProtocolError(reason), later posts are refused.
  void fail(const std::string& reason);
  std::optional<std::string> abort_reason() const;
  std::size_t waiting_messages() const;
  void reset();   // clears an abort, a failure, the turns and any undelivered messages (between jobs)

  void expect(const std::vector<ExpectedFrame>& frames);
  void begin_step(std::int64_t step);

 private:
  using Key = std::tuple<int, std::int64_t, int, int, int>;
  using Slot = std::tuple<int, int, int, int>;   // source, micro-batch, kind, virtual stage
  static Key key(int source, const Tag& tag);
  std::optional<std::string> refusal_locked(int source, const Tag& tag) const;
  bool turns_on() const { return live_step_.has_value() && !expected_.empty(); }

  int owner_rank_;
  mutable std::mutex mutex_;
  std::condition_variable arrived_;
  std::map<Key, kernels::Tensor> messages_;
  std::optional<std::string> aborted_;
  std::optional<std::string> failed_;
  std::set<Slot> expected_;
  std::optional<std::int64_t> live_step_;
  std::set<Key> taken_;   // pipeline frames taken in the live step and the next
};

}  // namespace pw::rpc
