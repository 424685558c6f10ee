#include "rpc/tensor_transfer_handler.h"

#include "core/log.h"
#include "rpc/frame_codec.h"

namespace pw::rpc {

TensorTransferHandler::TensorTransferHandler(int rank, FrameRules rules, Mailbox& mailbox)
    : rank_(rank), rules_(std::move(rules)), mailbox_(mailbox) {}

void TensorTransferHandler::refuse(const wire::TensorFrame& frame, const std::string& reason) {
  ++refused_;
  PW_LOG(Warn, "rank " << rank_ << " refused a frame claiming to come from rank " << frame.source_rank << ": "
                       << reason);
  wire::FrameRejected rejected;
  rejected.reason = reason;
  throw rejected;
}

void TensorTransferHandler::deliver(const wire::TensorFrame& frame) {
  ReceivedFrame received;
  try {
    received = decode_frame(frame, rules_);
  } catch (const BadFrameError& e) {
    refuse(frame, e.what());
  } catch (const std::exception& e) {   // e.g. bad_alloc for a frame that passed the size checks
    refuse(frame, std::string("could not store the frame: ") + e.what());
  }
  switch (mailbox_.post(received.source_rank, received.tag, std::move(received.tensor))) {
    case PostOutcome::Stored: return;
    case PostOutcome::Duplicate:
      refuse(frame, "duplicate frame: the " + tag_str(received.tag) + " from rank " +
                        std::to_string(received.source_rank) + " arrived before and was not yet received");
    case PostOutcome::Aborted:
      refuse(frame, "rank " + std::to_string(rank_) + " has aborted: " + mailbox_.abort_reason().value_or("?"));
  }
}

}  // namespace pw::rpc
