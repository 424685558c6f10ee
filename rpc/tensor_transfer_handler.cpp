#include "rpc/tensor_transfer_handler.h"

#include "core/log.h"
#include "rpc/connection_gate.h"

namespace pw::rpc {

TensorTransferHandler::TensorTransferHandler(int rank, FrameRules rules, Mailbox& mailbox)
    : rank_(rank), rules_(std::move(rules)), mailbox_(mailbox) {}

void TensorTransferHandler::refuse(int claimed_source, const std::string& reason) {
  ++refused_;
  PW_LOG(Warn, "rank " << rank_ << " refused a frame claiming to come from rank " << claimed_source << ": " << reason);
  wire::FrameRejected rejected;
  rejected.reason = reason;
  throw rejected;
}

void TensorTransferHandler::deliver(const wire::TensorFrame& frame) {
  ReceivedFrame received;
  try {
    received = decode_frame(frame, rules_);
    mark_connection_proven();
  } catch (const BadFrameError& e) {
    refuse(frame.source_rank, e.what());
  } catch (const std::exception& e) {   // e.g. bad_alloc for a frame that passed the size checks
    refuse(frame.source_rank, std::string("could not store the frame: ") + e.what());
  }
  store(std::move(received));
}

void TensorTransferHandler::store(ReceivedFrame received) {
  const int source = received.source_rank;
  const Tag tag = received.tag;
  switch (mailbox_.post(source, tag, std::move(received.tensor))) {
    case PostOutcome::Stored: return;
    case PostOutcome::Duplicate:
      refuse(source, "duplicate frame: the " + tag_str(tag) + " from rank " + std::to_string(source) +
                         " arrived before and was not yet received");
    case PostOutcome::Aborted:
      refuse(source, "rank " + std::to_string(rank_) + " has aborted: " + mailbox_.abort_reason().value_or("?"));
  }
}

}  // namespace pw::rpc
