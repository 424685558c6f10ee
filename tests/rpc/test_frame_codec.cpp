// Frame encoding/decoding, job tokens and addresses: the pieces below the sockets.
#include <cstdlib>
#include <cstring>

#include <boost/test/unit_test.hpp>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>

#include "pw_thrift/TensorTransfer.h"
#include "rpc/frame_codec.h"
#include "rpc/host_port.h"
#include "rpc/job_token.h"

namespace pw {
namespace {

using kernels::DType;
using kernels::Tensor;
using rpc::PayloadKind;
using rpc::Tag;

const rpc::FrameRules kRules{"token", 4, 1 << 20};

Tensor patterned(const kernels::Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  auto* bytes = static_cast<unsigned char*>(t.raw());
  for (std::size_t i = 0; i < t.nbytes(); ++i) bytes[i] = static_cast<unsigned char>(i * 37 + 11);
  return t;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(frame_codec)

BOOST_AUTO_TEST_CASE(encode_then_decode_keeps_tag_shape_dtype_and_bytes) {
  const Tensor t = Tensor::from_vector(std::vector<double>{1.5, -2.25, 3.0}, {3, 1});
  const Tag tag{11, 2, PayloadKind::TiedGradient, 3};
  const auto frame = rpc::encode_frame("token", 3, tag, t);
  BOOST_TEST(frame.data.size() == 24u);
  const rpc::ReceivedFrame got = rpc::decode_frame(frame, kRules);
  BOOST_TEST(got.source_rank == 3);
  BOOST_TEST(rpc::tag_str(got.tag) == rpc::tag_str(tag));
  BOOST_TEST((got.tag == tag));
  BOOST_TEST((got.tensor.dtype() == DType::F64));
  BOOST_TEST(got.tensor.shape() == t.shape());
  BOOST_TEST(std::memcmp(got.tensor.raw(), t.raw(), 24) == 0);

  // Half-precision activations travel as 2 bytes per element.
  for (const DType half : {DType::BF16, DType::F16}) {
    const Tensor h = patterned({3, 4}, half);
    const auto f = rpc::encode_frame("token", 1, tag, h);
    BOOST_TEST(f.data.size() == 24u);
    const rpc::ReceivedFrame back = rpc::decode_frame(f, kRules);
    BOOST_TEST((back.tensor.dtype() == half));
    BOOST_TEST(std::memcmp(back.tensor.raw(), h.raw(), 24) == 0);
  }

  // A collective's message keeps its operation, message and group through the frame.
  const Tag collective{1LL << 35, 41, PayloadKind::Collective, 123456789};
  const rpc::ReceivedFrame c = rpc::decode_frame(rpc::encode_frame("token", 0, collective, t), kRules);
  BOOST_TEST((c.tag == collective));
  BOOST_TEST(rpc::tag_str(c.tag) == "collective message 41 of group 123456789's operation 34359738368");
}

// The sender writes fields 1-8 with the protocol and the tensor bytes from the tensor itself; the
// receiver (and any Thrift peer) must see exactly what the generated client writes.
BOOST_AUTO_TEST_CASE(zero_copy_call_writes_the_same_bytes_as_the_generated_client) {
  using apache::thrift::protocol::TBinaryProtocol;
  using apache::thrift::transport::TFramedTransport;
  using apache::thrift::transport::TMemoryBuffer;
  const std::vector<std::pair<Tensor, Tag>> cases = {
      {patterned({0}, DType::F32), Tag{0, 0, PayloadKind::Activation, 0}},
      {patterned({}, DType::F64), Tag{1, 2, PayloadKind::Gradient, 3}},
      {patterned({3, 0, 2}, DType::I64), Tag{5, 0, PayloadKind::Evaluation, 1}},
      {patterned({7, 3}, DType::U8), Tag{1LL << 40, 7, PayloadKind::TiedGradient, 2}},
      {patterned({128, 1024}, DType::I32), Tag{9, 1, PayloadKind::Control, 0}},
      {patterned({4, 5}, DType::BF16), Tag{2, 1, PayloadKind::Activation, 0}},
      {patterned({6}, DType::F16), Tag{3, 0, PayloadKind::Gradient, 0}},
      {patterned({9}, DType::BF16), Tag{1LL << 33, 12, PayloadKind::Collective, 0x7ffffffe}},
  };
  for (const auto& [tensor, tag] : cases) {
    auto generated_buffer = std::make_shared<TMemoryBuffer>();
    rpc::wire::TensorTransferClient client(
        std::make_shared<TBinaryProtocol>(std::make_shared<TFramedTransport>(generated_buffer)));
    client.send_deliver(rpc::encode_frame("token", 2, tag, tensor));

    auto zero_copy_buffer = std::make_shared<TMemoryBuffer>();
    auto framed = std::make_shared<TFramedTransport>(zero_copy_buffer);
    TBinaryProtocol out(framed);
    const rpc::wire::TensorFrame header = rpc::encode_frame_header("token", 2, tag, tensor);
    BOOST_TEST(header.data.empty());
    rpc::write_deliver_call(out, header, std::span(static_cast<const std::byte*>(tensor.raw()), tensor.nbytes()));
    framed->writeEnd();
    framed->flush();

    const std::string expected = generated_buffer->getBufferAsString();
    const std::string got = zero_copy_buffer->getBufferAsString();
    BOOST_TEST(got.size() == expected.size());
    BOOST_TEST((got == expected), "bytes differ for " << rpc::tag_str(tag) << " of " << tensor.describe());
  }
}

BOOST_AUTO_TEST_CASE(check_frame_reasons) {
  auto reason = [](auto mutate) {
    auto frame = rpc::encode_frame("token", 1, Tag{0, 0, PayloadKind::Activation, 0}, Tensor::zeros({4}, DType::I32));
    mutate(frame);
    try {
      rpc::check_frame(frame, kRules);
    } catch (const rpc::BadFrameError& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  BOOST_TEST(reason([](auto&) {}) == "(accepted)");
  BOOST_TEST(reason([](auto& f) { f.job_token = "tokeN"; }) == "wrong job token");
  BOOST_TEST(reason([](auto& f) { f.data += "x"; }) == "shape [4] of I32 needs 16 bytes, the frame has 17");
  BOOST_TEST(reason([](auto& f) { f.shape = {4, -1}; }) == "dim 1 of the shape is negative (-1)");
  BOOST_TEST(reason([](auto& f) { f.dtype = static_cast<rpc::wire::ElementType::type>(0); }) ==
             "unknown dtype code 0; expected 1 (F32) to 7 (F16)");
  BOOST_TEST(reason([](auto& f) { f.kind = static_cast<rpc::wire::FrameKind::type>(9); }) ==
             "unknown frame kind 9; expected 1 (activation), 2 (gradient), 3 (tied gradient), 4 (evaluation), 5 (control) "
             "or 6 (collective)");
  BOOST_TEST(reason([](auto& f) { f.shape = {1LL << 62, 1LL << 62}; }).find("exceeds the maximum frame size") !=
             std::string::npos);
  BOOST_TEST(reason([](auto& f) {
               f.shape = {1 << 21};
               f.data.assign(1 << 21, '\0');
             }).find("over the maximum") != std::string::npos);
  BOOST_TEST(reason([](auto& f) { f.source_rank = 4; }) == "source rank 4 outside a world of 4");
  // An empty tensor is fine; its other dims must still fit the limit (keeps shape_numel bounded).
  BOOST_TEST(reason([](auto& f) {
               f.shape = {100, 0, 100};
               f.data.clear();
             }) == "(accepted)");
}

BOOST_AUTO_TEST_CASE(tokens_compare_whole_strings) {
  BOOST_TEST(rpc::tokens_equal("abc", "abc"));
  BOOST_TEST(!rpc::tokens_equal("abc", "abd"));
  BOOST_TEST(!rpc::tokens_equal("abc", "abcd"));
  BOOST_TEST(!rpc::tokens_equal("", "a"));
}

BOOST_AUTO_TEST_CASE(job_tokens_are_random_hex_and_read_from_the_environment) {
  const std::string a = rpc::make_job_token(), b = rpc::make_job_token();
  BOOST_TEST(a.size() == 32u);
  BOOST_TEST(a.find_first_not_of("0123456789abcdef") == std::string::npos);
  BOOST_TEST(a != b);
  ::unsetenv(rpc::kJobTokenEnv);
  BOOST_TEST(!rpc::job_token_from_env().has_value());
  ::setenv(rpc::kJobTokenEnv, a.c_str(), 1);
  BOOST_TEST(rpc::job_token_from_env().value() == a);
  ::setenv(rpc::kJobTokenEnv, "", 1);
  BOOST_CHECK_THROW(rpc::job_token_from_env(), InputError);
  ::setenv(rpc::kJobTokenEnv, "has space", 1);
  BOOST_CHECK_THROW(rpc::job_token_from_env(), InputError);
  ::unsetenv(rpc::kJobTokenEnv);
}

BOOST_AUTO_TEST_CASE(host_port_parsing) {
  const auto v4 = rpc::parse_host_port("127.0.0.1:29500");
  BOOST_TEST(v4.host == "127.0.0.1");
  BOOST_TEST(v4.port == 29500);
  const auto v6 = rpc::parse_host_port("[::1]:0");
  BOOST_TEST(v6.host == "::1");
  BOOST_TEST(v6.str() == "[::1]:0");
  BOOST_TEST(rpc::parse_host_port("node-3:1").str() == "node-3:1");
  for (const char* bad : {"", "host", ":80", "host:", "host:-1", "host:65536", "host:8x"})
    BOOST_CHECK_THROW(rpc::parse_host_port(bad), InputError);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace pw
