#include "dataparallel/ps/client_wire.h"

#include <algorithm>
#include <bit>
#include <memory>
#include <optional>

#include <thrift/TApplicationException.h>

#include "core/error.h"
#include "pw_thrift/ParameterServer.h"

namespace pw::dp {

namespace protocol = apache::thrift::protocol;

namespace {
// Rows are read in pieces of about this size: small enough to stay in cache until scattered.
constexpr std::size_t kStagingBytes = 256 * 1024;

// A list<i64>'s header and elements. TBinaryProtocol's i64s are big-endian: swapped into a buffer
// of this thread's and written as one block, which the transport may send from the buffer itself
// on flush: the caller flushes before this thread writes keys again.
void write_keys(protocol::TProtocol& out, const std::int64_t* keys, std::size_t n) {
  out.writeListBegin(protocol::T_I64, static_cast<std::uint32_t>(n));
  thread_local std::vector<std::uint64_t> big_endian;
  big_endian.resize(n);
  for (std::size_t k = 0; k < n; ++k) {
    const auto key = static_cast<std::uint64_t>(keys[k]);
    big_endian[k] = std::endian::native == std::endian::little ? __builtin_bswap64(key) : key;
  }
  out.getTransport()->write(reinterpret_cast<const std::uint8_t*>(big_endian.data()),
                            static_cast<std::uint32_t>(n * sizeof(std::uint64_t)));
  out.writeListEnd();
}

// A call's message header and its first two fields, which every parameter-server call has.
void begin_call(protocol::TProtocol& out, const char* method, const char* args, const std::string& job_token,
                const std::string& table) {
  out.writeMessageBegin(method, protocol::T_CALL, 0);
  out.writeStructBegin(args);
  out.writeFieldBegin("job_token", protocol::T_STRING, 1);
  out.writeString(job_token);
  out.writeFieldEnd();
  out.writeFieldBegin("table", protocol::T_STRING, 2);
  out.writeString(table);
  out.writeFieldEnd();
}

}  // namespace

void send_pull(protocol::TProtocol& out, const PullCall& c) {
  begin_call(out, "pull", "ParameterServer_pull_pargs", c.job_token, c.table);
  out.writeFieldBegin("keys", protocol::T_LIST, 3);
  write_keys(out, c.keys, c.count);
  out.writeFieldEnd();
  out.writeFieldBegin("step", protocol::T_I64, 4);
  out.writeI64(c.step);
  out.writeFieldEnd();
  out.writeFieldBegin("staleness", protocol::T_I32, 5);
  out.writeI32(c.staleness);
  out.writeFieldEnd();
  out.writeFieldBegin("timeout_ms", protocol::T_I32, 6);
  out.writeI32(c.timeout_ms);
  out.writeFieldEnd();
  out.writeFieldStop();
  out.writeStructEnd();
  out.writeMessageEnd();
  out.getTransport()->writeEnd();
  out.getTransport()->flush();
}

void read_pull_answer(protocol::TProtocol& in, std::size_t row_bytes, std::size_t expected_rows,
                      const std::function<void(std::size_t, std::size_t, const char*)>& rows) {
  std::string name;
  protocol::TMessageType type{};
  std::int32_t seqid = 0;
  in.readMessageBegin(name, type, seqid);
  if (type == protocol::T_EXCEPTION) {
    apache::thrift::TApplicationException x;
    x.read(&in);
    in.readMessageEnd();
    in.getTransport()->readEnd();
    throw x;
  }
  PW_CHECK(type == protocol::T_REPLY && name == "pull",
           "a parameter server answered a pull with message '" << name << "' of type " << static_cast<int>(type));
  bool answered = false;
  std::optional<rpc::wire::PsError> error;
  in.readStructBegin(name);
  for (;;) {
    protocol::TType field_type{};
    std::int16_t field = 0;
    in.readFieldBegin(name, field_type, field);
    if (field_type == protocol::T_STOP) break;
    if (field == 0 && field_type == protocol::T_STRING) {
      // TBinaryProtocol's binary: a 4-byte length, then the bytes.
      std::int32_t length = 0;
      in.readI32(length);
      PW_CHECK(length >= 0 && static_cast<std::size_t>(length) == expected_rows * row_bytes,
               "a parameter server answered a pull of " << expected_rows << " rows of " << row_bytes << " bytes with "
                                                         << length << " bytes");
      const std::size_t per_read = std::max<std::size_t>(1, kStagingBytes / row_bytes);
      std::vector<char> staging(std::min(per_read, expected_rows) * row_bytes);
      const auto transport = in.getTransport();
      for (std::size_t first = 0; first < expected_rows; first += per_read) {
        const std::size_t count = std::min(per_read, expected_rows - first);
        transport->readAll(reinterpret_cast<std::uint8_t*>(staging.data()), static_cast<std::uint32_t>(count * row_bytes));
        rows(first, count, staging.data());
      }
      answered = true;
    } else if (field == 1 && field_type == protocol::T_STRUCT) {
      error.emplace();
      error->read(&in);
    } else {
      in.skip(field_type);
    }
    in.readFieldEnd();
  }
  in.readStructEnd();
  in.readMessageEnd();
  in.getTransport()->readEnd();
  if (error) throw *error;
  if (!answered)
    throw apache::thrift::TApplicationException(apache::thrift::TApplicationException::MISSING_RESULT,
                                                "pull failed: the answer has neither rows nor an error");
}

void send_push(protocol::TProtocol& out, const PushCall& c) {
  PW_CHECK(c.begin <= c.end && c.end <= c.keys.size() && c.end <= c.rows_at.size(),
           "push part of rows " << c.begin << ".." << c.end << " of " << c.keys.size());
  const std::size_t row_bytes = c.row_floats * sizeof(float);
  begin_call(out, "push", "ParameterServer_push_pargs", c.job_token, c.table);
  out.writeFieldBegin("worker", protocol::T_I32, 3);
  out.writeI32(c.worker);
  out.writeFieldEnd();
  out.writeFieldBegin("step", protocol::T_I64, 4);
  out.writeI64(c.step);
  out.writeFieldEnd();
  out.writeFieldBegin("keys", protocol::T_LIST, 5);
  write_keys(out, c.keys.data() + c.begin, c.end - c.begin);
  out.writeFieldEnd();
  out.writeFieldBegin("grads", protocol::T_STRING, 6);
  // TBinaryProtocol's binary: a 4-byte length, then the bytes, here a run of adjacent rows at a
  // time (a long run goes to the socket from `grads` itself: StreamingFramedTransport).
  out.writeI32(static_cast<std::int32_t>((c.end - c.begin) * row_bytes));
  const auto transport = out.getTransport();
  for (std::size_t k = c.begin; k < c.end;) {
    std::size_t run = 1;
    while (k + run < c.end && c.rows_at[k + run] == c.rows_at[k] + run) ++run;
    transport->write(reinterpret_cast<const std::uint8_t*>(c.grads + c.rows_at[k] * c.row_floats),
                     static_cast<std::uint32_t>(run * row_bytes));
    k += run;
  }
  out.writeFieldEnd();
  out.writeFieldBegin("part", protocol::T_I32, 7);
  out.writeI32(c.part);
  out.writeFieldEnd();
  out.writeFieldBegin("parts", protocol::T_I32, 8);
  out.writeI32(c.parts);
  out.writeFieldEnd();
  out.writeFieldBegin("push_id", protocol::T_I64, 9);
  out.writeI64(c.push_id);
  out.writeFieldEnd();
  out.writeFieldStop();
  out.writeStructEnd();
  out.writeMessageEnd();
  transport->writeEnd();
  transport->flush();
}

}  // namespace pw::dp
