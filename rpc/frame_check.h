#pragma once
// Everything a receiver checks before trusting a TensorFrame: job token, source rank, tag fields,
// dtype, shape and byte count. Pure (no tensors, no sockets) so the fuzz target can drive it.
#include <cstddef>
#include <string>
#include <string_view>

#include "core/error.h"
#include "kernels/device.h"
#include "pw_thrift/pipewright_types.h"
#include "rpc/transport.h"

namespace pw::rpc {

// A frame the receiver refuses; the message is one line that the sender sees verbatim.
class BadFrameError : public InputError {
 public:
  using InputError::InputError;
};

inline constexpr int kMaxFrameDims = 16;
inline constexpr std::size_t kMaxJobTokenChars = 256;
inline constexpr std::size_t kMinJobTokenChars = 16;   // shorter would be guessed
inline constexpr const char* kWrongJobToken = "wrong job token";

struct FrameRules {
  std::string job_token;
  int world_size = 1;
  std::size_t max_frame_bytes = 0;   // payload bytes of one tensor
};

struct FrameHeader {
  int source_rank = 0;
  Tag tag;
  kernels::DType dtype = kernels::DType::F32;
  kernels::Shape shape;
};

// Throws BadFrameError ("wrong job token", "shape [2, 3] of F32 needs 24 bytes, the frame has 20").
FrameHeader check_frame(const wire::TensorFrame& frame, const FrameRules& rules);
// The same checks for a frame whose `payload_bytes` tensor bytes are not read yet (frame.data is
// ignored): a receiver runs it before it reads the bytes into a tensor.
FrameHeader check_frame_header(const wire::TensorFrame& frame, std::size_t payload_bytes, const FrameRules& rules);

// Compares in time independent of where the strings differ, so a token cannot be guessed bytewise.
bool tokens_equal(std::string_view a, std::string_view b);

wire::ElementType::type to_wire(kernels::DType dtype);
wire::FrameKind::type to_wire(PayloadKind kind);

}  // namespace pw::rpc
