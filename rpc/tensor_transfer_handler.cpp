#include "rpc/tensor_transfer_handler.h"

#include "core/log.h"
#include "rpc/connection_gate.h"

namespace pw::rpc {

TensorTransferHandler::TensorTransferHandler(int rank, FrameRules rules, Mailbox& mailbox)
    : rank_(rank), rules_(std::move(rules)), mailbox_(mailbox) {}

void TensorTransferHandler::refuse(int claimed_source, const std::string& reason) {
  ++refused_;
  // Wrong tokens are rate-limited per host and summarised (rpc/connection_gate.h), not a line each.
  const bool wrong_token = reason == kWrongJobToken;
  if (!wrong_token || note_wrong_token())
    PW_LOG(Warn, "rank " << rank_ << " refused a frame claiming to come from rank " << claimed_source << ": " << reason
                         << (wrong_token ? " (from " + serving_peer_address() + "; later ones from this host are "
                                           "rate-limited and counted in a line a minute)"
                                         : std::string()));
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

void TensorTransferHandler::refuse_out_of_turn(int source, const std::string& why) {
  // A peer that holds the job's token and breaks the protocol ends the job: the frame may be a
  // forgery meant to take the real one's place, and no later frame of it can be trusted.
  const std::string peer = serving_peer_address();
  const std::string reason = "rank " + std::to_string(rank_) + ": protocol error: " + why +
                             (peer.empty() ? std::string() : " (the connection from " + peer + ")");
  mailbox_.fail(reason);
  refuse(source, reason);
}

void TensorTransferHandler::check_turn(int source, const Tag& tag) {
  if (auto why = mailbox_.out_of_turn(source, tag)) refuse_out_of_turn(source, *why);
}

void TensorTransferHandler::store(ReceivedFrame received) {
  const int source = received.source_rank;
  const Tag tag = received.tag;
  std::string why;
  switch (mailbox_.post(source, tag, std::move(received.tensor), &why)) {
    case PostOutcome::Stored: return;
    case PostOutcome::OutOfTurn: refuse_out_of_turn(source, why);
    case PostOutcome::Duplicate: refuse(source, why);
    case PostOutcome::Aborted:
      refuse(source, "rank " + std::to_string(rank_) + " has aborted: " + mailbox_.abort_reason().value_or("?"));
  }
}

}  // namespace pw::rpc
