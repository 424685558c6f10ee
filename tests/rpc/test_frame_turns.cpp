// Frames are taken only in turn: a rank that knows its program's pipeline frames and its step
// admits a frame only for this step or the next, only one its program takes, and only once;
// a frame out of turn (even with the job's token, as an attacker who sniffed it would send) is
// refused, never used in place of the real one, ends the job as a protocol error naming the
// sender, and frames of steps that are over are neither stored nor kept.
#include <boost/test/unit_test.hpp>

#include "rpc/connection_gate.h"
#include "rpc/frame_codec.h"
#include "rpc/job_token.h"
#include "rpc/mailbox.h"
#include "rpc/tensor_transfer_handler.h"
#include "tests/rpc/rpc_test_world.h"

using namespace pw;
using kernels::Tensor;
using rpc::PayloadKind;
using rpc::Tag;
using test::error_of;
using test::in_ms;

namespace {

// Rank 1 of a 2-stage pipeline: activations of micro-batches 0 and 1 come from rank 0.
const std::vector<rpc::ExpectedFrame> kStageOneFrames = {{0, 0, PayloadKind::Activation, 1},
                                                         {0, 1, PayloadKind::Activation, 1}};

}  // namespace

BOOST_AUTO_TEST_CASE(a_mailbox_admits_only_this_step_and_the_next_once_each) {
  rpc::Mailbox box(1);
  box.expect(kStageOneFrames);
  box.begin_step(7);
  const auto post = [&](std::int64_t step, int mb, PayloadKind kind = PayloadKind::Activation, int source = 0) {
    std::string why;
    const auto outcome = box.post(source, Tag{step, mb, kind, 1}, Tensor::full({2}, static_cast<double>(step)), &why);
    return std::pair{outcome, why};
  };
  BOOST_TEST((post(7, 0).first == rpc::PostOutcome::Stored));
  BOOST_TEST((post(8, 0).first == rpc::PostOutcome::Stored));   // the next step, from a peer already in it
  auto [outcome, why] = post(9, 0);
  BOOST_TEST((outcome == rpc::PostOutcome::OutOfTurn));
  BOOST_TEST(why.find("rank 0 sent the activation of micro-batch 0 for virtual stage 1 (step 9) out of turn: that step "
                      "is ahead of its turn (rank 1 is on step 7") == 0,
             why);
  std::tie(outcome, why) = post(6, 1);
  BOOST_TEST((outcome == rpc::PostOutcome::OutOfTurn));
  BOOST_TEST(why.find("that step is over") != std::string::npos, why);
  std::tie(outcome, why) = post(7, 0);   // stored already
  BOOST_TEST(why.find("it came a second time in that step") != std::string::npos, why);
  std::tie(outcome, why) = post(7, 5);   // no such micro-batch in the program
  BOOST_TEST(why.find("takes no such frame from rank 0") != std::string::npos, why);
  std::tie(outcome, why) = post(7, 0, PayloadKind::Gradient);
  BOOST_TEST(why.find("takes no such frame") != std::string::npos, why);
  std::tie(outcome, why) = post(7, 0, PayloadKind::Activation, 2);
  BOOST_TEST(why.find("from rank 2") != std::string::npos, why);

  BOOST_TEST(box.take(0, Tag{7, 0, PayloadKind::Activation, 1}, in_ms(1000)).to_double_vector()[0] == 7.0);
  // Taken: the same frame again in this step is out of turn, not "the next use of the tag".
  std::tie(outcome, why) = post(7, 0);
  BOOST_TEST((outcome == rpc::PostOutcome::OutOfTurn));
  BOOST_TEST(why.find("a second time") != std::string::npos, why);
  // Other kinds (control messages, collectives) keep their own counters and are not turned.
  BOOST_TEST((box.post(0, Tag{123, 0, PayloadKind::Control, 0}, Tensor::full({1}, 1.0)) == rpc::PostOutcome::Stored));

  // The next step: what step 7 left is dropped, step 8's frame stays, step 9 is now in turn.
  BOOST_TEST((post(7, 1).first == rpc::PostOutcome::Stored));
  box.begin_step(8);
  BOOST_TEST(box.waiting_messages() == 2u);   // step 8's activation and the control message
  BOOST_TEST((post(9, 1).first == rpc::PostOutcome::Stored));
  BOOST_TEST(box.take(0, Tag{8, 0, PayloadKind::Activation, 1}, in_ms(1000)).to_double_vector()[0] == 8.0);
  // A rollback to the step it is on (the checkpoint just before a bad step) replays it.
  box.begin_step(8);
  BOOST_TEST((post(8, 0).first == rpc::PostOutcome::Stored));
  // A rollback further back: the replayed steps' frames are new again.
  box.begin_step(3);
  BOOST_TEST((post(3, 0).first == rpc::PostOutcome::Stored));
  BOOST_TEST((post(8, 0).first == rpc::PostOutcome::OutOfTurn));
}

BOOST_AUTO_TEST_CASE(a_failed_mailbox_ends_every_wait_with_the_protocol_error) {
  rpc::Mailbox box(1);
  box.expect(kStageOneFrames);
  box.begin_step(0);
  box.fail("rank 1: protocol error: rank 0 sent ... out of turn");
  try {
    box.take(0, Tag{0, 0, PayloadKind::Activation, 1}, in_ms(5000));
    BOOST_FAIL("expected a protocol error");
  } catch (const rpc::ProtocolError& e) {
    BOOST_TEST(std::string(e.what()).find("protocol error") != std::string::npos);
  }
  BOOST_TEST((box.post(0, Tag{0, 0, PayloadKind::Activation, 1}, Tensor::full({1}, 1.0)) == rpc::PostOutcome::Aborted));
}

// The attack on a network transport: a frame with the job's token and the tag of a future
// step. It is refused (never stored, never used), the sender is named, and the real frame's wait
// ends with the protocol error instead of training on a forgery.
BOOST_AUTO_TEST_CASE(a_frame_of_a_future_step_with_the_token_ends_the_job_naming_its_sender) {
  const std::string token = rpc::make_job_token();
  auto world = test::loopback_world(2, token);
  world[1]->expect_frames(kStageOneFrames);
  world[1]->begin_step(4);
  world[0]->send(1, Tag{4, 0, PayloadKind::Activation, 1}, Tensor::full({2}, 1.0), in_ms(5000));
  BOOST_TEST(world[1]->recv(0, Tag{4, 0, PayloadKind::Activation, 1}, in_ms(5000)).to_double_vector()[0] == 1.0);

  // The forger sends as rank 0 through its own connection, bytes read directly off the socket.
  rpc::ThriftTransport forger(0, 2, {"127.0.0.1:0", world[1]->address()}, token);
  const std::string refused =
      error_of([&] { forger.send(1, Tag{9, 1, PayloadKind::Activation, 1}, Tensor::full({2}, 3.0), in_ms(5000)); });
  BOOST_TEST(refused.find("rank 1 refused the frame: rank 1: protocol error: rank 0 sent the activation of micro-batch "
                          "1 for virtual stage 1 (step 9) out of turn") == 0,
             refused);
  BOOST_TEST(refused.find("(the connection from 127.0.0.1:") != std::string::npos, refused);
  BOOST_TEST(world[1]->handler().mailbox().waiting_messages() == 0u);   // its bytes were skipped, not kept

  // Rank 1's wait for its real frame ends with that protocol error (an input error: status 2).
  const std::string wait = error_of([&] { world[1]->recv(0, Tag{4, 1, PayloadKind::Activation, 1}, in_ms(5000)); });
  BOOST_TEST(wait.find("rank 1: protocol error: rank 0 sent the activation of micro-batch 1") == 0, wait);
  BOOST_CHECK_THROW(world[1]->recv(0, Tag{4, 1, PayloadKind::Activation, 1}, in_ms(10)), rpc::ProtocolError);
}

// Frames for steps that are over (a thousand of them in the audit) are refused one by one, each
// for that reason, and none is kept.
BOOST_AUTO_TEST_CASE(frames_of_finished_steps_are_never_kept) {
  rpc::Mailbox box(1);
  box.expect(kStageOneFrames);
  box.begin_step(50);
  for (int step = 0; step < 50; ++step) {
    std::string why;
    const auto outcome = box.post(0, Tag{step, step % 2, PayloadKind::Activation, 1}, Tensor::zeros({1024}), &why);
    BOOST_TEST((outcome == rpc::PostOutcome::OutOfTurn));
    BOOST_TEST(why.find("that step is over (rank 1 is on step 50)") != std::string::npos, why);
  }
  BOOST_TEST(box.waiting_messages() == 0u);
  // Over the network the first such frame ends the job; its bytes are never kept either.
  const std::string token = rpc::make_job_token();
  auto world = test::loopback_world(2, token);
  world[1]->expect_frames(kStageOneFrames);
  world[1]->begin_step(50);
  auto frame = rpc::encode_frame(token, 0, Tag{3, 1, PayloadKind::Activation, 1}, Tensor::zeros({1024}));
  try {
    world[1]->handler().deliver(frame);
    BOOST_FAIL("a frame of step 3 was taken on step 50");
  } catch (const rpc::wire::FrameRejected& e) {
    BOOST_TEST(e.reason.find("that step is over") != std::string::npos, e.reason);
  }
  BOOST_TEST(world[1]->handler().mailbox().waiting_messages() == 0u);
}

// Wrong tokens are counted per host and rate-limited: past the burst, a new connection from that
// host waits its turn, and with a refill too slow for any turn to come within its first-call
// deadline it is closed unread, so a guesser gets no answer at all. The job's own rank, whose
// connection proved itself before, is not slowed.
BOOST_AUTO_TEST_CASE(wrong_token_guesses_are_rate_limited_per_host) {
  rpc::ThriftTransportLimits limits;
  limits.gate.wrong_token_burst = 4;
  limits.gate.wrong_tokens_per_second = 1e-3;   // one turn in 1000 s: none within a 5 s deadline
  auto world = test::loopback_world(2, rpc::make_job_token(), {limits, limits});
  const Tag tag{0, 0, PayloadKind::Activation, 1};
  world[0]->send(1, tag, Tensor::full({2}, 1.0), in_ms(10000));   // proves rank 0's connection
  BOOST_TEST(world[1]->recv(0, tag, in_ms(5000)).to_double_vector()[0] == 1.0);
  for (int attempt = 0; attempt < 8; ++attempt) {
    rpc::ThriftTransport guesser(0, 2, {"127.0.0.1:0", world[1]->address()}, rpc::make_job_token());
    const std::string message = error_of([&] { guesser.send(1, tag, Tensor::full({2}, 1.0), in_ms(10000)); });
    if (attempt < 4) BOOST_TEST(message.find("wrong job token") != std::string::npos, message);
    else BOOST_TEST(message.find("wrong job token") == std::string::npos, message);   // closed unanswered
  }
  BOOST_TEST(world[1]->gate().wrong_tokens() == 4);
  BOOST_TEST(world[1]->gate().throttled() >= 4);   // each unanswered guess (a client may try again)
  BOOST_TEST(world[1]->refused_frames() == 4u);
  world[0]->send(1, Tag{1, 0, PayloadKind::Activation, 1}, Tensor::full({2}, 5.0), in_ms(10000));
  BOOST_TEST(world[1]->recv(0, Tag{1, 0, PayloadKind::Activation, 1}, in_ms(5000)).to_double_vector()[0] == 5.0);
}

BOOST_AUTO_TEST_CASE(a_short_job_token_is_refused) {
  const std::string message = error_of([] { rpc::check_job_token("abc", "PW_JOB_TOKEN"); });
  BOOST_TEST(message.find("PW_JOB_TOKEN has 3 characters; a job token needs at least 16") == 0, message);
  BOOST_CHECK_NO_THROW(rpc::check_job_token(std::string(16, 'x'), "PW_JOB_TOKEN"));
}
