#pragma once
// The two parameter-server calls whose payload is large, written and read by hand on the client
// instead of through Thrift's generated ParameterServerClient::pull / push, which would first
// gather a push's gradient rows into a string (then copy it into the frame), write keys one
// virtual call each, and read a pull's answer into a string (zero-filled, then filled, then
// scattered into place). Here a push's rows go in runs of adjacent rows (one of 16 KiB or more
// straight from the caller's gradients to the socket), keys go as one block, and a pull's answer
// comes off the socket through a small staging buffer into each row's place. The bytes on the wire are the ones the generated code would write and read
// (TBinaryProtocol, fields in IDL order).
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <thrift/protocol/TProtocol.h>

namespace pw::dp {

// Writes and flushes a pull call (ParameterServer.pull) of keys[0..count).
struct PullCall {
  const std::string& job_token;
  const std::string& table;
  const std::int64_t* keys;
  std::size_t count;
  std::int64_t step;
  std::int32_t staleness;
  std::int32_t timeout_ms;
};
void send_pull(apache::thrift::protocol::TProtocol& out, const PullCall& call);

// After send_pull: reads the answer. rows(first, count, data): `count` rows of `row_bytes` each,
// rows first..first+count-1 of the answer, at `data` (valid during the call). Throws the
// server's PsError, a TApplicationException it sent, or pw::Error if the answer is not
// `expected_rows` rows (the rest of the frame is then unread: close the connection).
void read_pull_answer(apache::thrift::protocol::TProtocol& in, std::size_t row_bytes, std::size_t expected_rows,
                      const std::function<void(std::size_t first, std::size_t count, const char* data)>& rows);

// Writes and flushes a push call (ParameterServer.push) whose gradients are the rows
// grads + rows_at[k] * row_floats of keys[k], k in [begin, end); the answer is read by the generated
// recv_push.
struct PushCall {
  const std::string& job_token;
  const std::string& table;
  std::int32_t worker;
  std::int64_t step;
  const std::vector<std::int64_t>& keys;      // keys[k] for k in [begin, end) are this part's
  const float* grads;
  std::size_t row_floats;
  const std::vector<std::size_t>& rows_at;    // keys[k]'s gradient row in `grads`
  std::size_t begin, end;
  std::int32_t part, parts;
  std::int64_t push_id;
};
void send_push(apache::thrift::protocol::TProtocol& out, const PushCall& call);

}  // namespace pw::dp
