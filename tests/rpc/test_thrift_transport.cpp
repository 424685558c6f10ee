// ThriftTransport endpoints in one process on loopback: round trips, ordering, deadlines, refusals,
// abort and shutdown.
#include <cstring>
#include <future>
#include <thread>

#include <boost/test/unit_test.hpp>

#include "rpc/frame_codec.h"
#include "rpc/job_token.h"
#include "rpc/tensor_transfer_handler.h"
#include "rpc_test_world.h"

namespace pw {
namespace {

using kernels::DType;
using kernels::Tensor;
using rpc::PayloadKind;
using rpc::Tag;
using test::in_ms;

using test::same_bits;
using test::error_of;
using test::byte_pattern;

}  // namespace

BOOST_AUTO_TEST_SUITE(thrift_transport)

BOOST_AUTO_TEST_CASE(two_ranks_round_trip_activations_and_gradients_bit_exact) {
  auto world = test::loopback_world(2, rpc::make_job_token());
  const std::vector<std::pair<kernels::Shape, DType>> cases = {
      {{4, 3, 8, 8}, DType::F32}, {{17}, DType::F64}, {{2, 5}, DType::I64}, {{3, 0, 2}, DType::F32},
      {{}, DType::F32},           {{7, 9}, DType::I32}, {{1000}, DType::U8}, {{256, 1024}, DType::F32}};
  int micro_batch = 0;
  for (const auto& [shape, dtype] : cases) {
    const Tensor activation = byte_pattern(shape, dtype, micro_batch);
    const Tag forward{3, micro_batch, PayloadKind::Activation, 1};
    world[0]->send(1, forward, activation, in_ms(5000));
    BOOST_TEST(same_bits(world[1]->recv(0, forward, in_ms(5000)), activation));

    const Tensor gradient = byte_pattern(shape, dtype, micro_batch + 100);
    const Tag backward{3, micro_batch, PayloadKind::Gradient, 0};
    world[1]->send(0, backward, gradient, in_ms(5000));
    BOOST_TEST(same_bits(world[0]->recv(1, backward, in_ms(5000)), gradient));
    ++micro_batch;
  }
  // NaN payloads and signed zeros survive untouched: bytes, not values, travel.
  Tensor odd = Tensor::from_vector(std::vector<float>{std::nanf("7"), -0.0f, 1e-45f}, {3});
  world[0]->send(1, Tag{4, 0, PayloadKind::Activation, 1}, odd, in_ms(5000));
  BOOST_TEST(same_bits(world[1]->recv(0, Tag{4, 0, PayloadKind::Activation, 1}, in_ms(5000)), odd));
}

BOOST_AUTO_TEST_CASE(three_ranks_out_of_order_tags_and_tied_gradients) {
  auto world = test::loopback_world(3, rpc::make_job_token());
  // Rank 0 and rank 2 both send to rank 1, which receives in the reverse order of sending.
  for (int mb = 0; mb < 4; ++mb) {
    world[0]->send(1, Tag{0, mb, PayloadKind::Activation, 1}, Tensor::full({2, 2}, mb), in_ms(5000));
    world[2]->send(1, Tag{0, mb, PayloadKind::Gradient, 1}, Tensor::full({3}, 10 + mb, DType::F64), in_ms(5000));
  }
  world[2]->send(1, Tag{0, 0, PayloadKind::TiedGradient, 2}, Tensor::full({5}, -1.0), in_ms(5000));
  BOOST_TEST(world[1]->recv(2, Tag{0, 0, PayloadKind::TiedGradient, 2}, in_ms(5000)).to_double_vector() ==
             std::vector<double>(5, -1.0));
  for (int mb = 3; mb >= 0; --mb) {
    BOOST_TEST(world[1]->recv(2, Tag{0, mb, PayloadKind::Gradient, 1}, in_ms(5000)).to_double_vector() ==
               std::vector<double>(3, 10.0 + mb));
    BOOST_TEST(world[1]->recv(0, Tag{0, mb, PayloadKind::Activation, 1}, in_ms(5000)).to_double_vector() ==
               std::vector<double>(4, mb));
  }
}

BOOST_AUTO_TEST_CASE(concurrent_senders_to_one_receiver) {
  auto world = test::loopback_world(3, rpc::make_job_token());
  auto sender = [&](int from) {
    for (int mb = 0; mb < 20; ++mb)
      world[from]->send(1, Tag{1, mb, PayloadKind::Activation, from}, Tensor::full({64}, from * 100 + mb), in_ms(5000));
  };
  std::thread a(sender, 0), b(sender, 2);
  for (int mb = 0; mb < 20; ++mb)
    for (int from : {0, 2})
      BOOST_TEST(world[1]->recv(from, Tag{1, mb, PayloadKind::Activation, from}, in_ms(5000)).to_double_vector()[0] ==
                 from * 100 + mb);
  a.join();
  b.join();
}

BOOST_AUTO_TEST_CASE(recv_timeout_names_rank_peer_and_tag) {
  auto world = test::loopback_world(2, rpc::make_job_token());
  const std::string message = error_of([&] { world[1]->recv(0, Tag{7, 2, PayloadKind::Activation, 1}, in_ms(100)); });
  BOOST_TEST(message == "rank 1 timed out waiting for the activation of micro-batch 2 for virtual stage 1 (step 7) "
                        "from rank 0");
  BOOST_CHECK_THROW(world[1]->recv(0, Tag{7, 2, PayloadKind::Activation, 1}, in_ms(10)), rpc::TimeoutError);
}

BOOST_AUTO_TEST_CASE(wrong_token_is_refused_and_receiver_keeps_serving) {
  const std::string token = rpc::make_job_token();
  auto world = test::loopback_world(2, token);
  // An intruder that knows rank 1's address but not the token.
  rpc::ThriftTransport intruder(0, 2, {"127.0.0.1:0", world[1]->address()}, rpc::make_job_token());
  const std::string message =
      error_of([&] { intruder.send(1, Tag{0, 0, PayloadKind::Activation, 1}, Tensor::full({2}, 1.0), in_ms(5000)); });
  BOOST_TEST(message.find("rank 1 refused the frame: wrong job token") == 0, message);
  BOOST_TEST(world[1]->refused_frames() == 1u);
  BOOST_CHECK_THROW(world[1]->recv(0, Tag{0, 0, PayloadKind::Activation, 1}, in_ms(50)), rpc::TimeoutError);

  world[0]->send(1, Tag{0, 0, PayloadKind::Activation, 1}, Tensor::full({2}, 5.0), in_ms(5000));
  BOOST_TEST(world[1]->recv(0, Tag{0, 0, PayloadKind::Activation, 1}, in_ms(5000)).to_double_vector()[0] == 5.0);
}

BOOST_AUTO_TEST_CASE(duplicate_tag_is_refused) {
  auto world = test::loopback_world(2, rpc::make_job_token());
  const Tag tag{0, 1, PayloadKind::Gradient, 0};
  world[1]->send(0, tag, Tensor::full({2}, 1.0), in_ms(5000));
  const std::string message = error_of([&] { world[1]->send(0, tag, Tensor::full({2}, 2.0), in_ms(5000)); });
  BOOST_TEST(message.find("rank 0 refused the frame: duplicate frame") == 0, message);
  BOOST_TEST(world[0]->recv(1, tag, in_ms(5000)).to_double_vector()[0] == 1.0);
  // Once received, the same tag may come again (the next use of a reused tag).
  world[1]->send(0, tag, Tensor::full({2}, 3.0), in_ms(5000));
  BOOST_TEST(world[0]->recv(1, tag, in_ms(5000)).to_double_vector()[0] == 3.0);
}

BOOST_AUTO_TEST_CASE(oversized_frames_are_refused_and_receiver_keeps_serving) {
  rpc::ThriftTransportLimits small{1024};
  rpc::ThriftTransportLimits large{64u << 20};
  auto world = test::loopback_world(2, rpc::make_job_token(), {large, small});
  const Tag tag{0, 0, PayloadKind::Activation, 1};

  // Over the receiver's limit but within Thrift's frame allowance: a clear refusal.
  std::string message = error_of([&] { world[0]->send(1, tag, Tensor::zeros({512}), in_ms(5000)); });
  BOOST_TEST(message.find("rank 1 refused the frame: frame carries 2048 bytes, over the maximum of 1024") == 0,
             message);
  // Far over it: the receiver's framed transport drops the connection before reading the frame.
  // Sends are pipelined, so when the socket's buffers took the whole frame before the receiver
  // closed (a loaded machine), the loss shows on the next send instead (another tag, so that it
  // cannot stand in for the message checked at the end).
  message = error_of([&] { world[0]->send(1, tag, Tensor::zeros({1 << 20}), in_ms(5000)); });
  if (message == "(no error)")
    message = error_of([&] { world[0]->send(1, Tag{0, 5, PayloadKind::Activation, 1}, Tensor::zeros({4}), in_ms(5000)); });
  BOOST_TEST(message.find("lost the connection while sending") != std::string::npos, message);
  // Over the sender's own limit: refused before anything is sent.
  message = error_of([&] { world[1]->send(0, tag, Tensor::zeros({1024}), in_ms(5000)); });
  BOOST_TEST(message.find("exceed the maximum frame size of 1024") != std::string::npos, message);

  world[0]->send(1, tag, Tensor::full({4}, 2.0), in_ms(5000));
  BOOST_TEST(world[1]->recv(0, tag, in_ms(5000)).to_double_vector() == std::vector<double>(4, 2.0));
}

BOOST_AUTO_TEST_CASE(malformed_frames_fed_to_the_handler_are_refused_without_harm) {
  const std::string token = rpc::make_job_token();
  auto world = test::loopback_world(2, token);
  const Tag tag{0, 0, PayloadKind::Activation, 1};
  const auto good = rpc::encode_frame(token, 0, tag, Tensor::full({2, 3}, 1.0));
  auto refused = [&](auto mutate, const std::string& expected) {
    auto frame = good;
    mutate(frame);
    try {
      world[1]->handler().deliver(frame);
      BOOST_ERROR("frame accepted; expected: " << expected);
    } catch (const rpc::wire::FrameRejected& e) {
      BOOST_TEST(e.reason.find(expected) != std::string::npos, e.reason);
    }
  };
  refused([](auto& f) { f.data.pop_back(); }, "needs 24 bytes, the frame has 23");
  refused([](auto& f) { f.shape = {2, 4}; }, "needs 32 bytes");
  refused([](auto& f) { f.dtype = static_cast<rpc::wire::ElementType::type>(42); }, "unknown dtype code 42");
  refused([](auto& f) { f.kind = static_cast<rpc::wire::FrameKind::type>(0); }, "unknown frame kind 0");
  refused([](auto& f) { f.shape = {-2, -3}; }, "negative");
  refused([](auto& f) { f.shape = {1LL << 40, 1LL << 40, 0}; }, "exceeds the maximum frame size");
  refused([](auto& f) { f.shape = std::vector<std::int64_t>(40, 1); }, "at most 16");
  refused([](auto& f) { f.source_rank = 5; }, "source rank 5 outside a world of 2");
  refused([](auto& f) { f.source_rank = -1; }, "source rank -1");
  refused([](auto& f) { f.step = -1; }, "negative step");
  refused([](auto& f) { f.job_token = ""; }, "wrong job token");
  BOOST_TEST(world[1]->refused_frames() == 11u);

  world[0]->send(1, tag, Tensor::full({2, 3}, 4.0), in_ms(5000));
  BOOST_TEST(world[1]->recv(0, tag, in_ms(5000)).to_double_vector() == std::vector<double>(6, 4.0));
}

BOOST_AUTO_TEST_CASE(abort_wakes_a_waiting_recv_and_later_ones) {
  auto world = test::loopback_world(2, rpc::make_job_token());
  auto waiting = std::async(std::launch::async, [&] {
    return error_of([&] { world[1]->recv(0, Tag{0, 0, PayloadKind::Activation, 1}, in_ms(30000)); });
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto start = std::chrono::steady_clock::now();
  world[1]->abort("rank 0 failed");
  BOOST_TEST(waiting.get() == "rank 0 failed");
  BOOST_TEST((std::chrono::steady_clock::now() - start < std::chrono::seconds(2)));
  BOOST_CHECK_THROW(world[1]->recv(0, Tag{0, 1, PayloadKind::Activation, 1}, in_ms(30000)), rpc::AbortedError);
  // Frames arriving after the abort are refused, not stored.
  const std::string message =
      error_of([&] { world[0]->send(1, Tag{0, 2, PayloadKind::Activation, 1}, Tensor::full({1}, 1.0), in_ms(5000)); });
  BOOST_TEST(message.find("rank 1 has aborted: rank 0 failed") != std::string::npos, message);
}

BOOST_AUTO_TEST_CASE(unreachable_peer_times_out_naming_its_address) {
  std::string dead_address;
  {
    rpc::ThriftTransport gone(1, 2, {"127.0.0.1:0", "127.0.0.1:0"}, rpc::make_job_token());
    dead_address = gone.address();
  }
  rpc::ThriftTransport alone(0, 2, {"127.0.0.1:0", dead_address}, rpc::make_job_token());
  const auto start = std::chrono::steady_clock::now();
  const std::string message =
      error_of([&] { alone.send(1, Tag{0, 0, PayloadKind::Activation, 1}, Tensor::full({1}, 1.0), in_ms(300)); });
  BOOST_TEST(message.find("rank 0 could not reach rank 1 at " + dead_address) == 0, message);
  BOOST_TEST((std::chrono::steady_clock::now() - start < std::chrono::seconds(3)));
  BOOST_CHECK_THROW(alone.send(1, Tag{0, 0, PayloadKind::Activation, 1}, Tensor::full({1}, 1.0), in_ms(100)),
                    rpc::TimeoutError);
}

BOOST_AUTO_TEST_CASE(peer_that_starts_late_is_reached_before_the_deadline) {
  const std::string token = rpc::make_job_token();
  // Reserve a port, free it, and start the receiver on it only after the send began.
  std::string address;
  { address = rpc::ThriftTransport(1, 2, {"127.0.0.1:0", "127.0.0.1:0"}, token).address(); }
  rpc::ThriftTransport sender(0, 2, {"127.0.0.1:0", address}, token);
  auto sending = std::async(std::launch::async, [&] {
    sender.send(1, Tag{0, 0, PayloadKind::Activation, 1}, Tensor::full({3}, 9.0), in_ms(10000));
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  rpc::ThriftTransport receiver(1, 2, {"127.0.0.1:0", address}, token);
  sending.get();
  BOOST_TEST(receiver.recv(0, Tag{0, 0, PayloadKind::Activation, 1}, in_ms(5000)).to_double_vector() ==
             std::vector<double>(3, 9.0));
}

BOOST_AUTO_TEST_CASE(destructor_with_connected_peers_does_not_hang) {
  auto world = test::loopback_world(3, rpc::make_job_token());
  world[0]->send(1, Tag{0, 0, PayloadKind::Activation, 1}, Tensor::full({8}, 1.0), in_ms(5000));
  world[2]->send(1, Tag{0, 0, PayloadKind::Gradient, 1}, Tensor::full({8}, 1.0), in_ms(5000));
  // Rank 1's peers keep open connections to it while it shuts down.
  const auto start = std::chrono::steady_clock::now();
  world[1].reset();
  BOOST_TEST((std::chrono::steady_clock::now() - start < std::chrono::seconds(2)));
  // The next send to the gone rank fails (no hang) and names it.
  const std::string message =
      error_of([&] { world[0]->send(1, Tag{0, 1, PayloadKind::Activation, 1}, Tensor::full({8}, 1.0), in_ms(300)); });
  BOOST_TEST(message.find("rank 1 at 127.0.0.1:") != std::string::npos, message);
  world.clear();
  BOOST_TEST((std::chrono::steady_clock::now() - start < std::chrono::seconds(4)));
}

BOOST_AUTO_TEST_CASE(bad_construction_arguments_are_input_errors) {
  const std::string token = rpc::make_job_token();
  BOOST_CHECK_THROW(rpc::ThriftTransport(0, 2, {"127.0.0.1:0"}, token), InputError);
  BOOST_CHECK_THROW(rpc::ThriftTransport(0, 1, {"localhost"}, token), InputError);
  BOOST_CHECK_THROW(rpc::ThriftTransport(0, 1, {"127.0.0.1:70000"}, token), InputError);
  BOOST_CHECK_THROW(rpc::ThriftTransport(0, 1, {"127.0.0.1:0"}, ""), InputError);
  BOOST_CHECK_THROW(rpc::ThriftTransport(2, 2, {"127.0.0.1:0", "127.0.0.1:0"}, token), InputError);
  BOOST_CHECK_THROW(rpc::ThriftTransport(0, 1, {"127.0.0.1:0"}, token, {0}), InputError);
  // A port already taken is an Error naming the address.
  rpc::ThriftTransport first(0, 1, {"127.0.0.1:0"}, token);
  const std::string message = error_of([&] { rpc::ThriftTransport(0, 1, {first.address()}, token); });
  BOOST_TEST(message.find("cannot serve on " + first.address()) != std::string::npos, message);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace pw
