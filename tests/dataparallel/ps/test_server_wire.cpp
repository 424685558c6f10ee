// The parameter server's hand-written push reader (PsServerProcessor) against the bytes Thrift's
// binary protocol writes: fields in IDL order and in any other, fields of the wrong type skipped,
// missing ones at the IDL's defaults, keys swapped from big-endian, gradients handed over exactly,
// the receiver's PsError and other exceptions answered as the generated processor answers them,
// malformed lists refused before anything is handed over, and calls other than push left to the
// generated path.
#include <cstring>
#include <functional>
#include <memory>
#include <optional>

#include <boost/test/unit_test.hpp>
#include <thrift/TApplicationException.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>

#include "dataparallel/ps/server_wire.h"

namespace protocol = apache::thrift::protocol;
namespace transport = apache::thrift::transport;
using pw::dp::PsServerProcessor;
using pw::dp::PushRequest;

namespace {

// What the receiver saw, copied out of the call.
struct Seen {
  std::string token, table;
  std::int32_t worker = -1, part = -1, parts = -1;
  std::int64_t step = -1, push_id = -1;
  std::vector<std::int64_t> keys;
  std::vector<float> grads;
  std::size_t grad_bytes = 0;
};

// An interface the generated path answers: only stats is reached here.
class StatsOnly : public pw::rpc::wire::ParameterServerNull {
 public:
  void stats(pw::rpc::wire::ShardStats& out, const std::string&, const std::string& table) override {
    out.rows = static_cast<std::int64_t>(table.size());
  }
};

struct Call {
  std::shared_ptr<transport::TMemoryBuffer> request = std::make_shared<transport::TMemoryBuffer>();
  std::shared_ptr<protocol::TBinaryProtocol> writer = std::make_shared<protocol::TBinaryProtocol>(request);

  void begin(const std::string& method = "push") {
    writer->writeMessageBegin(method, protocol::T_CALL, 7);
    writer->writeStructBegin("args");
  }
  void string_field(int16_t id, const std::string& v) {
    writer->writeFieldBegin("f", protocol::T_STRING, id);
    writer->writeString(v);
    writer->writeFieldEnd();
  }
  void i32_field(int16_t id, std::int32_t v) {
    writer->writeFieldBegin("f", protocol::T_I32, id);
    writer->writeI32(v);
    writer->writeFieldEnd();
  }
  void i64_field(int16_t id, std::int64_t v) {
    writer->writeFieldBegin("f", protocol::T_I64, id);
    writer->writeI64(v);
    writer->writeFieldEnd();
  }
  void keys_field(const std::vector<std::int64_t>& keys, protocol::TType element = protocol::T_I64) {
    writer->writeFieldBegin("keys", protocol::T_LIST, 5);
    writer->writeListBegin(element, static_cast<uint32_t>(keys.size()));
    for (auto k : keys) element == protocol::T_I64 ? writer->writeI64(k) : writer->writeI32(static_cast<std::int32_t>(k));
    writer->writeListEnd();
    writer->writeFieldEnd();
  }
  void grads_field(const std::vector<float>& grads) {
    std::string bytes(grads.size() * sizeof(float), '\0');
    std::memcpy(bytes.data(), grads.data(), bytes.size());
    writer->writeFieldBegin("grads", protocol::T_STRING, 6);
    writer->writeBinary(bytes);
    writer->writeFieldEnd();
  }
  void end() {
    writer->writeFieldStop();
    writer->writeStructEnd();
    writer->writeMessageEnd();
  }

  // Runs the processor over the request; the answer's transport.
  std::shared_ptr<transport::TMemoryBuffer> run(PsServerProcessor& processor) {
    auto answer = std::make_shared<transport::TMemoryBuffer>();
    processor.process(std::make_shared<protocol::TBinaryProtocol>(request),
                      std::make_shared<protocol::TBinaryProtocol>(answer), nullptr);
    return answer;
  }
};

struct Processor {
  Seen seen;
  int calls = 0;
  std::function<void()> then = [] {};
  PsServerProcessor processor{std::make_shared<StatsOnly>(), [this](const PushRequest& r) {
                                ++calls;
                                seen.token = r.job_token;
                                seen.table = r.table;
                                seen.worker = r.worker;
                                seen.step = r.step;
                                seen.part = r.part;
                                seen.parts = r.parts;
                                seen.push_id = r.push_id;
                                seen.keys = *r.keys;
                                seen.grad_bytes = r.grad_bytes;
                                seen.grads.assign(r.grad_bytes / sizeof(float), 0.0f);
                                std::memcpy(seen.grads.data(), r.grads, seen.grads.size() * sizeof(float));
                                then();
                              }};
};

// The answer to a push: the PsError it carries, or nothing; a T_EXCEPTION answer's message in `exception`.
std::optional<pw::rpc::wire::PsError> push_answer(transport::TMemoryBuffer& answer, std::string* exception = nullptr) {
  protocol::TBinaryProtocol in(std::shared_ptr<transport::TTransport>(&answer, [](auto*) {}));
  std::string name;
  protocol::TMessageType type;
  int32_t seqid = 0;
  in.readMessageBegin(name, type, seqid);
  BOOST_TEST(name == "push");
  BOOST_TEST(seqid == 7);
  if (type == protocol::T_EXCEPTION) {
    apache::thrift::TApplicationException x;
    x.read(&in);
    if (exception != nullptr) *exception = x.what();
    return std::nullopt;
  }
  BOOST_TEST(type == protocol::T_REPLY);
  pw::rpc::wire::ParameterServer_push_presult result;
  result.read(&in);
  if (result.__isset.error) return result.error;
  return std::nullopt;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(server_wire)

BOOST_AUTO_TEST_CASE(a_push_in_idl_order_reaches_the_receiver_whole) {
  Processor p;
  Call c;
  const std::vector<std::int64_t> keys = {0, -1, 1, std::int64_t{1} << 62, -(std::int64_t{1} << 40) - 3};
  std::vector<float> grads(keys.size() * 3);
  for (std::size_t i = 0; i < grads.size(); ++i) grads[i] = 0.25f * static_cast<float>(i) - 1.0f;
  c.begin();
  c.string_field(1, "token");
  c.string_field(2, "emb");
  c.i32_field(3, 2);
  c.i64_field(4, 41);
  c.keys_field(keys);
  c.grads_field(grads);
  c.i32_field(7, 1);
  c.i32_field(8, 3);
  c.i64_field(9, 99);
  c.end();
  auto answer = c.run(p.processor);
  BOOST_TEST(!push_answer(*answer).has_value());
  BOOST_TEST(p.calls == 1);
  BOOST_TEST(p.seen.token == "token");
  BOOST_TEST(p.seen.table == "emb");
  BOOST_TEST(p.seen.worker == 2);
  BOOST_TEST(p.seen.step == 41);
  BOOST_TEST(p.seen.keys == keys);
  BOOST_TEST(p.seen.grads == grads);
  BOOST_TEST(p.seen.part == 1);
  BOOST_TEST(p.seen.parts == 3);
  BOOST_TEST(p.seen.push_id == 99);
}

BOOST_AUTO_TEST_CASE(fields_in_any_order_wrong_types_skipped_missing_ones_at_their_defaults) {
  Processor p;
  Call c;
  c.begin();
  c.grads_field({1.0f, 2.0f});
  c.i64_field(3, 5);              // worker is an i32: skipped
  c.keys_field({7});
  c.string_field(4, "not a step");   // skipped
  c.string_field(2, "emb");
  c.i32_field(42, 1);             // unknown field: skipped
  c.string_field(1, "token");
  c.end();
  auto answer = c.run(p.processor);
  BOOST_TEST(!push_answer(*answer).has_value());
  BOOST_REQUIRE(p.calls == 1);
  BOOST_TEST(p.seen.worker == 0);
  BOOST_TEST(p.seen.step == 0);
  BOOST_TEST(p.seen.keys == std::vector<std::int64_t>{7});
  BOOST_TEST(p.seen.grads == (std::vector<float>{1.0f, 2.0f}));
  BOOST_TEST(p.seen.part == 0);    // the IDL's defaults
  BOOST_TEST(p.seen.parts == 1);
  BOOST_TEST(p.seen.push_id == 0);
}

BOOST_AUTO_TEST_CASE(buffers_kept_between_pushes_hold_only_the_current_push) {
  Processor p;
  for (std::size_t n : {std::size_t{4096}, std::size_t{3}, std::size_t{0}, std::size_t{70000}, std::size_t{5}}) {
    std::vector<std::int64_t> keys(n);
    std::vector<float> grads(n * 2);
    for (std::size_t i = 0; i < n; ++i) keys[i] = static_cast<std::int64_t>(n * 1000 + i);
    for (std::size_t i = 0; i < grads.size(); ++i) grads[i] = static_cast<float>(n) + static_cast<float>(i);
    Call c;
    c.begin();
    c.keys_field(keys);
    c.grads_field(grads);
    c.end();
    auto answer = c.run(p.processor);
    BOOST_TEST(!push_answer(*answer).has_value());
    BOOST_TEST(p.seen.keys == keys);
    BOOST_TEST(p.seen.grads == grads);
    BOOST_TEST(p.seen.grad_bytes == grads.size() * sizeof(float));
  }
}

BOOST_AUTO_TEST_CASE(the_receivers_errors_are_answered_as_the_generated_processor_answers_them) {
  Processor p;
  p.then = [] {
    pw::rpc::wire::PsError e;
    e.reason = "worker 0 pushed step 5 after step 0";
    e.code = pw::rpc::wire::PsErrorCode::BAD_REQUEST;
    throw e;
  };
  Call c;
  c.begin();
  c.keys_field({1});
  c.end();
  auto answer = c.run(p.processor);
  const auto error = push_answer(*answer);
  BOOST_REQUIRE(error.has_value());
  BOOST_TEST(error->reason == "worker 0 pushed step 5 after step 0");
  BOOST_TEST(error->code == pw::rpc::wire::PsErrorCode::BAD_REQUEST);

  p.then = [] { throw std::runtime_error("disk full"); };
  Call again;
  again.begin();
  again.end();
  auto second = again.run(p.processor);
  std::string exception;
  BOOST_TEST(!push_answer(*second, &exception).has_value());
  BOOST_TEST(exception == "disk full");
}

BOOST_AUTO_TEST_CASE(malformed_lists_and_sizes_are_refused_before_the_receiver_runs) {
  Processor p;
  {
    Call c;   // keys as a list of i32
    c.begin();
    c.keys_field({1, 2}, protocol::T_I32);
    c.end();
    BOOST_CHECK_THROW(c.run(p.processor), protocol::TProtocolException);
  }
  {
    Call c;   // gradients of negative length
    c.begin();
    c.writer->writeFieldBegin("grads", protocol::T_STRING, 6);
    c.writer->writeI32(-4);
    c.end();
    BOOST_CHECK_THROW(c.run(p.processor), protocol::TProtocolException);
  }
  {
    Call c;   // more keys announced than the message holds
    c.begin();
    c.writer->writeFieldBegin("keys", protocol::T_LIST, 5);
    c.writer->writeListBegin(protocol::T_I64, 1000);
    c.writer->writeI64(1);
    BOOST_CHECK_THROW(c.run(p.processor), transport::TTransportException);
  }
  BOOST_TEST(p.calls == 0);
}

BOOST_AUTO_TEST_CASE(other_calls_take_the_generated_path) {
  Processor p;
  Call c;
  c.begin("stats");
  c.string_field(1, "token");
  c.string_field(2, "four");
  c.end();
  auto answer = c.run(p.processor);
  protocol::TBinaryProtocol in(answer);
  std::string name;
  protocol::TMessageType type;
  int32_t seqid = 0;
  in.readMessageBegin(name, type, seqid);
  BOOST_TEST(name == "stats");
  BOOST_TEST(type == protocol::T_REPLY);
  pw::rpc::wire::ShardStats stats;
  pw::rpc::wire::ParameterServer_stats_presult result;
  result.success = &stats;
  result.read(&in);
  BOOST_TEST(stats.rows == 4);
  BOOST_TEST(p.calls == 0);
}

BOOST_AUTO_TEST_SUITE_END()
