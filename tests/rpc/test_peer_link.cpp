// The zero-copy, pipelined sending side (PeerLink, ThriftTransport::send) and the receiver's
// direct path: refusals of pipelined frames, closing with frames unanswered, skipping refused
// bytes, and bitwise round trips of every dtype.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <arpa/inet.h>

#include <chrono>
#include <cstring>
#include <span>
#include <thread>

#include <boost/test/unit_test.hpp>
#include <thrift/TConfiguration.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>

#include "kernels/runtime.h"
#include "pw_thrift/TensorTransfer.h"
#include "rpc/direct_tensor_processor.h"
#include "rpc/frame_codec.h"
#include "rpc/job_token.h"
#include "rpc/mailbox.h"
#include "rpc/peer_link.h"
#include "rpc/streaming_framed_transport.h"
#include "rpc/tensor_transfer_handler.h"
#include "rpc_test_world.h"

namespace pw {
namespace {

using kernels::DType;
using kernels::Tensor;
using rpc::PayloadKind;
using rpc::Tag;
using test::in_ms;
using Clock = std::chrono::steady_clock;

constexpr std::int64_t kLargeFloats = 256 * 1024;   // 1 MiB of F32: pipelined
static_assert(kLargeFloats * 4 >= static_cast<std::int64_t>(rpc::PeerLink::kPipelinedAtLeast));

using test::same_bits;
using test::error_of;
using test::byte_pattern;

std::span<const std::byte> bytes_of(const Tensor& t) {
  return {static_cast<const std::byte*>(t.raw()), t.nbytes()};
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A receiver's DirectTensorTransferProcessor serving calls that a client wrote into memory, read
// through the server's framed transport as they would be off a socket; its answers go to `replies`.
struct ProcessorOverMemory {
  ProcessorOverMemory(const std::string& token, std::size_t max_frame_bytes)
      : rules{token, 2, max_frame_bytes},
        handler(std::make_shared<rpc::TensorTransferHandler>(1, rules, mailbox)),
        processor(handler) {}

  void send(const std::string& with_token, const Tag& tag, const Tensor& t) {
    rpc::write_deliver_call(client_out, rpc::encode_frame_header(with_token, 0, tag, t), bytes_of(t));
    client_framed->writeEnd();
    client_framed->flush();
  }
  bool serve() { return processor.process(in, out, nullptr); }

  rpc::FrameRules rules;
  rpc::Mailbox mailbox{1};
  std::shared_ptr<rpc::TensorTransferHandler> handler;
  rpc::DirectTensorTransferProcessor processor;
  std::shared_ptr<apache::thrift::transport::TMemoryBuffer> wire_bytes =
      std::make_shared<apache::thrift::transport::TMemoryBuffer>();
  std::shared_ptr<apache::thrift::transport::TFramedTransport> client_framed =
      std::make_shared<apache::thrift::transport::TFramedTransport>(wire_bytes);
  apache::thrift::protocol::TBinaryProtocol client_out{client_framed};
  std::shared_ptr<apache::thrift::protocol::TBinaryProtocol> in = std::make_shared<apache::thrift::protocol::TBinaryProtocol>(
      std::make_shared<rpc::StreamingFramedTransport>(
          wire_bytes, std::make_shared<apache::thrift::TConfiguration>(100 * 1024 * 1024, 64 * 1024 * 1024)));
  std::shared_ptr<apache::thrift::transport::TMemoryBuffer> replies =
      std::make_shared<apache::thrift::transport::TMemoryBuffer>();
  std::shared_ptr<apache::thrift::protocol::TBinaryProtocol> out = std::make_shared<apache::thrift::protocol::TBinaryProtocol>(
      std::make_shared<apache::thrift::transport::TFramedTransport>(replies));
};

// A TCP peer on 127.0.0.1 that reads whatever it is sent and never answers.
class SilentPeer {
 public:
  SilentPeer() {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    BOOST_REQUIRE(listener_ >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    BOOST_REQUIRE(::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    BOOST_REQUIRE(::listen(listener_, 4) == 0);
    socklen_t len = sizeof addr;
    BOOST_REQUIRE(::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    port_ = ntohs(addr.sin_port);
    reader_ = std::thread([this] {
      const int fd = ::accept(listener_, nullptr, nullptr);
      if (fd < 0) return;
      std::vector<char> sink(64 * 1024);
      while (::recv(fd, sink.data(), sink.size(), 0) > 0) {
      }
      ::close(fd);
    });
  }
  ~SilentPeer() {
    ::shutdown(listener_, SHUT_RDWR);   // wakes an accept that never got a connection
    reader_.join();
    ::close(listener_);
  }
  int port() const { return port_; }

 private:
  int listener_ = -1;
  int port_ = 0;
  std::thread reader_;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(peer_link)

BOOST_AUTO_TEST_CASE(refused_large_frame_surfaces_on_the_next_send_naming_its_tag) {
  auto world = test::loopback_world(2, rpc::make_job_token());
  const Tag tag{0, 1, PayloadKind::Activation, 1};
  const Tensor first = byte_pattern({kLargeFloats}, DType::F32, 1);
  world[0]->send(1, tag, first, in_ms(5000));
  // The duplicate is pipelined: send returns once it is written, before the refusal comes back.
  BOOST_CHECK_NO_THROW(world[0]->send(1, tag, byte_pattern({kLargeFloats}, DType::F32, 2), in_ms(5000)));
  const Tag next{0, 2, PayloadKind::Activation, 1};
  const std::string message = error_of([&] { world[0]->send(1, next, Tensor::full({2}, 1.0), in_ms(5000)); });
  BOOST_TEST(message.find("rank 1 refused the frame: duplicate frame") == 0, message);
  BOOST_TEST(message.find("(the " + rpc::tag_str(tag) + " from rank 0 to rank 1 at") != std::string::npos, message);
  BOOST_TEST(world[1]->refused_frames() == 1u);
  BOOST_TEST(same_bits(world[1]->recv(0, tag, in_ms(5000)), first));
}

BOOST_AUTO_TEST_CASE(refused_large_frame_with_a_wrong_token_surfaces_on_the_next_send) {
  auto world = test::loopback_world(2, rpc::make_job_token());
  rpc::PeerLink intruder(0, 1, rpc::parse_host_port(world[1]->address()));
  const auto never_aborted = [] {};
  const Tag tag{3, 0, PayloadKind::Gradient, 0};
  const Tensor big = byte_pattern({kLargeFloats}, DType::F32, 3);
  const auto header = rpc::encode_frame_header(rpc::make_job_token(), 0, tag, big);
  BOOST_CHECK_NO_THROW(intruder.deliver(header, bytes_of(big), tag, in_ms(5000), never_aborted));
  const Tag next{3, 1, PayloadKind::Gradient, 0};
  const Tensor small = Tensor::full({2}, 1.0);
  const std::string message = error_of([&] {
    intruder.deliver(rpc::encode_frame_header(rpc::make_job_token(), 0, next, small), bytes_of(small), next,
                     in_ms(5000), never_aborted);
  });
  BOOST_TEST(message.find("rank 1 refused the frame: wrong job token") == 0, message);
  BOOST_TEST(message.find("(the " + rpc::tag_str(tag) + " from rank 0") != std::string::npos, message);
  BOOST_TEST(world[1]->refused_frames() == 2u);
}

BOOST_AUTO_TEST_CASE(destroying_a_transport_delivers_its_unanswered_pipelined_frames) {
  auto world = test::loopback_world(2, rpc::make_job_token());
  std::vector<Tensor> sent;
  for (int mb = 0; mb < static_cast<int>(rpc::PeerLink::kUnansweredFrames); ++mb) {
    sent.push_back(byte_pattern({kLargeFloats}, DType::F32, mb));
    world[0]->send(1, Tag{0, mb, PayloadKind::Activation, 1}, sent.back(), in_ms(5000));
  }
  const auto start = Clock::now();
  world[0].reset();
  BOOST_TEST(seconds_since(start) < 3.0);
  for (int mb = 0; mb < static_cast<int>(sent.size()); ++mb)
    BOOST_TEST(same_bits(world[1]->recv(0, Tag{0, mb, PayloadKind::Activation, 1}, in_ms(5000)), sent[mb]));
  BOOST_TEST(world[1]->refused_frames() == 0u);
}

BOOST_AUTO_TEST_CASE(closing_a_link_to_a_peer_that_never_answers_returns_in_bounded_time) {
  SilentPeer silent;
  const Tensor big = byte_pattern({kLargeFloats}, DType::F32, 4);
  Clock::time_point start;
  {
    rpc::PeerLink link(0, 1, rpc::HostPort{"127.0.0.1", silent.port()});
    for (int mb = 0; mb < 2; ++mb) {
      const Tag tag{0, mb, PayloadKind::Activation, 1};
      link.deliver(rpc::encode_frame_header("token", 0, tag, big), bytes_of(big), tag, in_ms(5000), [] {});
    }
    start = Clock::now();
  }
  BOOST_TEST(seconds_since(start) < 4.0);   // waits up to 2 s for the answers, then closes
}

BOOST_AUTO_TEST_CASE(connection_keeps_working_after_a_refused_large_frame_was_skipped) {
  auto world = test::loopback_world(2, rpc::make_job_token());
  const Tag dup{1, 0, PayloadKind::Activation, 1};
  const Tensor first = byte_pattern({kLargeFloats}, DType::F32, 5);
  world[0]->send(1, dup, first, in_ms(5000));
  world[0]->send(1, dup, byte_pattern({kLargeFloats + 3}, DType::F32, 6), in_ms(5000));   // refused, skipped
  const Tag after{1, 1, PayloadKind::Activation, 1};
  const Tensor next = byte_pattern({kLargeFloats}, DType::F64, 7);
  world[0]->send(1, after, next, in_ms(5000));   // read right behind the skipped bytes
  const Tag small_tag{1, 2, PayloadKind::Activation, 1};
  const std::string message = error_of([&] { world[0]->send(1, small_tag, Tensor::full({3}, 8.0), in_ms(5000)); });
  BOOST_TEST(message.find("rank 1 refused the frame: duplicate frame") == 0, message);
  // The connection stayed in step: no reconnect error, and every other frame arrived intact.
  const Tag last{1, 3, PayloadKind::Activation, 1};
  world[0]->send(1, last, Tensor::full({2}, 9.0), in_ms(5000));
  BOOST_TEST(same_bits(world[1]->recv(0, dup, in_ms(5000)), first));
  BOOST_TEST(same_bits(world[1]->recv(0, after, in_ms(5000)), next));
  BOOST_TEST(world[1]->recv(0, small_tag, in_ms(5000)).to_double_vector() == std::vector<double>(3, 8.0));
  BOOST_TEST(world[1]->recv(0, last, in_ms(5000)).to_double_vector() == std::vector<double>(2, 9.0));
  BOOST_TEST(world[1]->refused_frames() == 1u);
}

// The same, one level down and deterministic: three calls in one byte stream through the server's
// framed transport; the first two are refused from their headers and their bytes skipped.
BOOST_AUTO_TEST_CASE(direct_processor_skips_refused_bytes_and_serves_the_next_call) {
  using namespace apache::thrift;
  const std::string token = rpc::make_job_token();
  ProcessorOverMemory server(token, 512 * 1024);
  const Tensor big = byte_pattern({kLargeFloats / 2}, DType::F32, 8);   // 512 KiB: at the limit
  const Tensor too_big = byte_pattern({kLargeFloats}, DType::F32, 9);   // over the rules' maximum
  const Tag good{0, 2, PayloadKind::Activation, 1};
  server.send(rpc::make_job_token(), Tag{0, 0, PayloadKind::Activation, 1}, big);
  server.send(token, Tag{0, 1, PayloadKind::Activation, 1}, too_big);
  server.send(token, good, big);
  for (int i = 0; i < 3; ++i) BOOST_TEST(server.serve());

  rpc::wire::TensorTransferClient reader(std::make_shared<protocol::TBinaryProtocol>(
      std::make_shared<transport::TFramedTransport>(server.replies)));
  BOOST_CHECK_THROW(reader.recv_deliver(), rpc::wire::FrameRejected);
  BOOST_CHECK_THROW(reader.recv_deliver(), rpc::wire::FrameRejected);
  BOOST_CHECK_NO_THROW(reader.recv_deliver());
  BOOST_TEST(server.handler->refused_frames() == 2u);
  BOOST_TEST(same_bits(server.mailbox.take(0, good, in_ms(1000)), big));
}

BOOST_AUTO_TEST_CASE(every_dtype_and_empty_tensors_round_trip_bitwise) {
  auto world = test::loopback_world(2, rpc::make_job_token());
  int mb = 0;
  for (const DType dtype : {DType::F32, DType::F64, DType::I64, DType::I32, DType::U8}) {
    const std::int64_t large = 600 * 1024 / static_cast<std::int64_t>(kernels::dtype_size(dtype));
    for (const kernels::Shape& shape : std::vector<kernels::Shape>{{large}, {33, 7}, {}, {0}, {4, 0, 3}}) {
      const Tensor sent = byte_pattern(shape, dtype, mb);
      const Tag tag{2, mb++, PayloadKind::Activation, 1};
      world[0]->send(1, tag, sent, in_ms(5000));
      const Tensor got = world[1]->recv(0, tag, in_ms(5000));
      BOOST_TEST(same_bits(got, sent), kernels::dtype_name(dtype) << " " << kernels::shape_str(shape));
    }
  }
}

// A connection's first large frame of a size maps the block for its next frame too (reserved in
// the cache, not in use), so that the next frame of that size is not read into fresh pages;
// later frames of the size map nothing.
BOOST_AUTO_TEST_CASE(the_first_large_frame_of_a_size_reserves_the_block_for_the_next) {
  const std::string token = rpc::make_job_token();
  const std::int64_t floats = (std::int64_t{5} << 20) / 4 + 4096;   // a size no other test here sends
  ProcessorOverMemory server(token, static_cast<std::size_t>(floats * 4));
  auto& allocator = kernels::DeviceRuntime::get(kernels::Device::cpu()).allocator();
  const auto block = static_cast<std::int64_t>(kernels::CachingAllocator::round_size(static_cast<std::size_t>(floats * 4)));

  std::vector<Tensor> sent;   // made first: they come from the same allocator
  for (int mb = 0; mb < 3; ++mb) sent.push_back(byte_pattern({floats}, DType::F32, mb));
  const auto before = allocator.stats();
  for (int mb = 0; mb < 3; ++mb) {
    const Tag tag{0, mb, PayloadKind::Activation, 1};
    server.send(token, tag, sent[mb]);
    BOOST_TEST(server.serve());
    const Tensor got = server.mailbox.take(0, tag, in_ms(1000));
    BOOST_TEST(same_bits(got, sent[mb]));
    const auto now = allocator.stats();
    BOOST_TEST(now.reserved - before.reserved == 2 * block, "after frame " << mb);   // its block and the next
    BOOST_TEST(now.in_use - before.in_use == block);                                  // only the frame held
  }
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace pw
