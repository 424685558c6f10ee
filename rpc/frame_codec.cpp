#include "rpc/frame_codec.h"

#include <bit>
#include <cstring>

namespace pw::rpc {

// Frames carry raw host bytes and promise little-endian; a big-endian host would need byte swaps.
static_assert(std::endian::native == std::endian::little, "pipewright frames assume a little-endian host");

wire::TensorFrame encode_frame(const std::string& job_token, int source_rank, const Tag& tag,
                               const kernels::Tensor& tensor, std::string reuse) {
  PW_CHECK(tensor.defined(), "rank " << source_rank << " cannot send an undefined tensor as the " << tag_str(tag));
  const kernels::Tensor host = tensor.to(kernels::Device::cpu());
  wire::TensorFrame frame;
  frame.data = std::move(reuse);
  frame.job_token = job_token;
  frame.source_rank = source_rank;
  frame.step = tag.step;
  frame.micro_batch = tag.micro_batch;
  frame.kind = to_wire(tag.kind);
  frame.virtual_stage = tag.virtual_stage;
  frame.dtype = to_wire(host.dtype());
  frame.shape.assign(host.shape().begin(), host.shape().end());
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

}  // namespace pw::rpc
