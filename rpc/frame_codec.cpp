#include "rpc/frame_codec.h"

#include <bit>
#include <cstdint>
#include <cstring>
#include <limits>

#include <thrift/protocol/TProtocol.h>
#include <thrift/protocol/TProtocolException.h>

namespace pw::rpc {

namespace protocol = apache::thrift::protocol;

// Frames carry raw host bytes and promise little-endian; a big-endian host would need byte swaps.
static_assert(std::endian::native == std::endian::little, "pipewright frames assume a little-endian host");

wire::TensorFrame encode_frame_header(const std::string& job_token, int source_rank, const Tag& tag,
                                      const kernels::Tensor& host) {
  PW_CHECK(host.defined(), "rank " << source_rank << " cannot send an undefined tensor as the " << tag_str(tag));
  PW_CHECK(host.device() == kernels::Device::cpu(),
           "rank " << source_rank << " encodes the " << tag_str(tag) << " from a tensor not on the CPU");
  wire::TensorFrame frame;
  frame.job_token = job_token;
  frame.source_rank = source_rank;
  frame.step = tag.step;
  frame.micro_batch = tag.micro_batch;
  frame.kind = to_wire(tag.kind);
  frame.virtual_stage = tag.virtual_stage;
  frame.dtype = to_wire(host.dtype());
  frame.shape.assign(host.shape().begin(), host.shape().end());
  return frame;
}

wire::TensorFrame encode_frame(const std::string& job_token, int source_rank, const Tag& tag,
                               const kernels::Tensor& tensor, std::string reuse) {
  PW_CHECK(tensor.defined(), "rank " << source_rank << " cannot send an undefined tensor as the " << tag_str(tag));
  const kernels::Tensor host = tensor.to(kernels::Device::cpu());
  wire::TensorFrame frame = encode_frame_header(job_token, source_rank, tag, host);
  frame.data = std::move(reuse);
  frame.data.assign(static_cast<const char*>(host.raw()), host.nbytes());
  return frame;
}

ReceivedFrame decode_frame(const wire::TensorFrame& frame, const FrameRules& rules) {
  FrameHeader header = check_frame(frame, rules);
  ReceivedFrame received;
  received.source_rank = header.source_rank;
  received.tag = header.tag;
  received.tensor = kernels::Tensor::empty(header.shape, header.dtype, kernels::Device::cpu());
  if (!frame.data.empty()) std::memcpy(received.tensor.raw(), frame.data.data(), frame.data.size());
  return received;
}

// Mirrors the generated TensorTransferClient::send_deliver, TensorTransfer_deliver_pargs::write and
// TensorFrame::write (field order, names, types); tests compare the bytes with theirs.
void write_deliver_call(protocol::TProtocol& out, const wire::TensorFrame& header, std::span<const std::byte> data) {
  if (data.size() > static_cast<std::size_t>(std::numeric_limits<int32_t>::max()))
    throw protocol::TProtocolException(protocol::TProtocolException::SIZE_LIMIT,
                                       "frame data of " + std::to_string(data.size()) + " bytes is too large");
  out.writeMessageBegin("deliver", protocol::T_CALL, 0);
  out.writeStructBegin("TensorTransfer_deliver_pargs");
  out.writeFieldBegin("frame", protocol::T_STRUCT, 1);

  out.writeStructBegin("TensorFrame");
  out.writeFieldBegin("job_token", protocol::T_STRING, 1);
  out.writeString(header.job_token);
  out.writeFieldEnd();
  out.writeFieldBegin("source_rank", protocol::T_I32, 2);
  out.writeI32(header.source_rank);
  out.writeFieldEnd();
  out.writeFieldBegin("step", protocol::T_I64, 3);
  out.writeI64(header.step);
  out.writeFieldEnd();
  out.writeFieldBegin("micro_batch", protocol::T_I32, 4);
  out.writeI32(header.micro_batch);
  out.writeFieldEnd();
  out.writeFieldBegin("kind", protocol::T_I32, 5);
  out.writeI32(header.kind);
  out.writeFieldEnd();
  out.writeFieldBegin("virtual_stage", protocol::T_I32, 6);
  out.writeI32(header.virtual_stage);
  out.writeFieldEnd();
  out.writeFieldBegin("dtype", protocol::T_I32, 7);
  out.writeI32(header.dtype);
  out.writeFieldEnd();
  out.writeFieldBegin("shape", protocol::T_LIST, 8);
  out.writeListBegin(protocol::T_I64, static_cast<uint32_t>(header.shape.size()));
  for (const std::int64_t dim : header.shape) out.writeI64(dim);
  out.writeListEnd();
  out.writeFieldEnd();
  // writeBinary's encoding (an i32 length, then the bytes), with the bytes handed over as they are.
  out.writeFieldBegin("data", protocol::T_STRING, 9);
  out.writeI32(static_cast<int32_t>(data.size()));
  if (!data.empty())
    out.getTransport()->write(reinterpret_cast<const uint8_t*>(data.data()), static_cast<uint32_t>(data.size()));
  out.writeFieldEnd();
  out.writeFieldStop();
  out.writeStructEnd();

  out.writeFieldEnd();
  out.writeFieldStop();
  out.writeStructEnd();
  out.writeMessageEnd();
}

}  // namespace pw::rpc
