#pragma once
// TensorFrame <-> (source rank, Tag, Tensor). Decoding validates with check_frame first, so a
// decoded tensor always has the shape, dtype and byte count the frame claims.
#include <cstddef>
#include <span>
#include <string>

#include "kernels/tensor.h"
#include "pw_thrift/pipewright_types.h"
#include "rpc/frame_check.h"
#include "rpc/transport.h"

namespace apache::thrift::protocol {
class TProtocol;
}

namespace pw::rpc {

struct ReceivedFrame {
  int source_rank = 0;
  Tag tag;
  kernels::Tensor tensor;   // on the CPU
};

// Fields 1-8 of the frame for `host` (a CPU tensor); `data` stays empty: the bytes go out
// separately, through write_deliver_call.
wire::TensorFrame encode_frame_header(const std::string& job_token, int source_rank, const Tag& tag,
                                      const kernels::Tensor& host);
// Copies the tensor's bytes (from any device) into a frame; `reuse` (optional) lends its
// capacity to the frame's data so repeated sends need not allocate.
wire::TensorFrame encode_frame(const std::string& job_token, int source_rank, const Tag& tag,
                               const kernels::Tensor& tensor, std::string reuse = {});
// Throws BadFrameError for anything check_frame refuses.
ReceivedFrame decode_frame(const wire::TensorFrame& frame, const FrameRules& rules);

// Writes the call TensorTransfer.deliver(frame) up to writeMessageEnd, where `frame` is `header`
// (its `data` ignored) with `data` as field 9: the same bytes the generated client's send_deliver
// writes, but `data` reaches the transport in one write() straight from the caller's memory
// rather than from a string (binary protocol: the generated writer writes the length with
// writeI32 there too). The caller ends the message (writeEnd, flush).
void write_deliver_call(apache::thrift::protocol::TProtocol& out, const wire::TensorFrame& header,
                        std::span<const std::byte> data);

}  // namespace pw::rpc
