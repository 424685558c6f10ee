#pragma once
// TensorFrame <-> (source rank, Tag, Tensor). Decoding validates with check_frame first, so a
// decoded tensor always has the shape, dtype and byte count the frame claims.
#include <string>

#include "kernels/tensor.h"
#include "pw_thrift/pipewright_types.h"
#include "rpc/frame_check.h"
#include "rpc/transport.h"

namespace pw::rpc {

struct ReceivedFrame {
  int source_rank = 0;
  Tag tag;
  kernels::Tensor tensor;   // on the CPU
};

// Copies the tensor's bytes (from any device) into a frame; `reuse` (optional) lends its
// capacity to the frame's data so repeated sends need not allocate.
wire::TensorFrame encode_frame(const std::string& job_token, int source_rank, const Tag& tag,
                               const kernels::Tensor& tensor, std::string reuse = {});
// Throws BadFrameError for anything check_frame refuses.
ReceivedFrame decode_frame(const wire::TensorFrame& frame, const FrameRules& rules);

}  // namespace pw::rpc
