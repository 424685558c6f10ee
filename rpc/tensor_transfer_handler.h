#pragma once
// The server side of TensorTransfer for one rank: validates each frame and stores it in the
// rank's mailbox. A bad frame is answered with FrameRejected (the sender sees the reason); it
// never takes the receiver down.
#include <atomic>
#include <cstddef>
#include <string>

#include "pw_thrift/TensorTransfer.h"
#include "rpc/frame_check.h"
#include "rpc/frame_codec.h"
#include "rpc/mailbox.h"

namespace pw::rpc {

class TensorTransferHandler : public wire::TensorTransferIf {
 public:
  TensorTransferHandler(int rank, FrameRules rules, Mailbox& mailbox);
  void deliver(const wire::TensorFrame& frame) override;   // throws wire::FrameRejected
  // For a frame decoded elsewhere (already checked by check_frame): stores it or throws FrameRejected.
  // A frame out of turn (rpc/mailbox.h) is refused and ends this rank's receiving (a protocol error).
  void store(ReceivedFrame received);
  // Before a frame's bytes are read: refuses it (ending the job, as store would) when it is out of
  // turn, so that its bytes are skipped instead of allocated.
  void check_turn(int source, const Tag& tag);
  // Counts and logs the refusal, then throws FrameRejected with `reason`.
  [[noreturn]] void refuse(int claimed_source, const std::string& reason);
  const FrameRules& rules() const { return rules_; }
  Mailbox& mailbox() { return mailbox_; }
  std::size_t refused_frames() const { return refused_.load(); }

 private:
  [[noreturn]] void refuse_out_of_turn(int source, const std::string& why);
  int rank_;
  FrameRules rules_;
  Mailbox& mailbox_;
  std::atomic<std::size_t> refused_{0};
};

}  // namespace pw::rpc
