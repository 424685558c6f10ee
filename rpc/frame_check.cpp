#include "rpc/frame_check.h"

#include "core/secrets.h"

namespace pw::rpc {

namespace {

kernels::DType dtype_from_wire(int value) {
  switch (value) {
    case wire::ElementType::F32: return kernels::DType::F32;
    case wire::ElementType::F64: return kernels::DType::F64;
    case wire::ElementType::I64: return kernels::DType::I64;
    case wire::ElementType::I32: return kernels::DType::I32;
    case wire::ElementType::U8: return kernels::DType::U8;
    case wire::ElementType::BF16: return kernels::DType::BF16;
    case wire::ElementType::F16: return kernels::DType::F16;
  }
  throw BadFrameError("unknown dtype code " + std::to_string(value) + "; expected 1 (F32) to 7 (F16)");
}

PayloadKind kind_from_wire(int value) {
  switch (value) {
    case wire::FrameKind::ACTIVATION: return PayloadKind::Activation;
    case wire::FrameKind::GRADIENT: return PayloadKind::Gradient;
    case wire::FrameKind::TIED_GRADIENT: return PayloadKind::TiedGradient;
    case wire::FrameKind::EVALUATION: return PayloadKind::Evaluation;
    case wire::FrameKind::CONTROL: return PayloadKind::Control;
    case wire::FrameKind::COLLECTIVE: return PayloadKind::Collective;
  }
  throw BadFrameError("unknown frame kind " + std::to_string(value) +
                      "; expected 1 (activation), 2 (gradient), 3 (tied gradient), 4 (evaluation), 5 (control) or "
                      "6 (collective)");
}

// Bytes the shape needs, or throws when a dim is negative or the product passes `max_bytes`.
// Zero dims are skipped in the product so that every partial product stays bounded (shape_numel
// must never overflow on a shape like [2^31, 2^31, 2^31, 0]).
std::size_t required_bytes(const kernels::Shape& shape, kernels::DType dtype, std::size_t max_bytes) {
  std::size_t bytes = kernels::dtype_size(dtype);
  bool empty = false;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    const std::int64_t dim = shape[i];
    if (dim < 0)
      throw BadFrameError("dim " + std::to_string(i) + " of the shape is negative (" + std::to_string(dim) + ")");
    if (dim == 0) {
      empty = true;
      continue;
    }
    const auto d = static_cast<std::size_t>(dim);
    if (bytes > max_bytes / d)
      throw BadFrameError("shape " + kernels::shape_str(shape) + " of " + kernels::dtype_name(dtype) +
                          " exceeds the maximum frame size of " + std::to_string(max_bytes) + " bytes");
    bytes *= d;
  }
  return empty ? 0 : bytes;
}

}  // namespace

bool tokens_equal(std::string_view a, std::string_view b) { return secrets_equal(a, b); }

FrameHeader check_frame(const wire::TensorFrame& frame, const FrameRules& rules) {
  return check_frame_header(frame, frame.data.size(), rules);
}

FrameHeader check_frame_header(const wire::TensorFrame& frame, std::size_t payload_bytes, const FrameRules& rules) {
  if (!tokens_equal(frame.job_token, rules.job_token)) throw BadFrameError(kWrongJobToken);
  if (frame.source_rank < 0 || frame.source_rank >= rules.world_size)
    throw BadFrameError("source rank " + std::to_string(frame.source_rank) + " outside a world of " +
                        std::to_string(rules.world_size));
  if (frame.step < 0 || frame.micro_batch < 0 || frame.virtual_stage < 0)
    throw BadFrameError("negative step, micro-batch or virtual stage (" + std::to_string(frame.step) + ", " +
                        std::to_string(frame.micro_batch) + ", " + std::to_string(frame.virtual_stage) + ")");
  FrameHeader header;
  header.source_rank = frame.source_rank;
  header.tag = Tag{frame.step, frame.micro_batch, kind_from_wire(frame.kind), frame.virtual_stage};
  header.dtype = dtype_from_wire(frame.dtype);
  if (frame.shape.size() > static_cast<std::size_t>(kMaxFrameDims))
    throw BadFrameError("shape has " + std::to_string(frame.shape.size()) + " dims; at most " +
                        std::to_string(kMaxFrameDims) + " are accepted");
  header.shape.assign(frame.shape.begin(), frame.shape.end());
  if (payload_bytes > rules.max_frame_bytes)
    throw BadFrameError("frame carries " + std::to_string(payload_bytes) + " bytes, over the maximum of " +
                        std::to_string(rules.max_frame_bytes));
  const std::size_t needed = required_bytes(header.shape, header.dtype, rules.max_frame_bytes);
  if (needed != payload_bytes)
    throw BadFrameError("shape " + kernels::shape_str(header.shape) + " of " + kernels::dtype_name(header.dtype) +
                        " needs " + std::to_string(needed) + " bytes, the frame has " +
                        std::to_string(payload_bytes));
  return header;
}

wire::ElementType::type to_wire(kernels::DType dtype) {
  switch (dtype) {
    case kernels::DType::F32: return wire::ElementType::F32;
    case kernels::DType::F64: return wire::ElementType::F64;
    case kernels::DType::I64: return wire::ElementType::I64;
    case kernels::DType::I32: return wire::ElementType::I32;
    case kernels::DType::U8: return wire::ElementType::U8;
    case kernels::DType::BF16: return wire::ElementType::BF16;
    case kernels::DType::F16: return wire::ElementType::F16;
  }
  PW_FAIL("dtype " << static_cast<int>(dtype) << " has no wire code");
}

wire::FrameKind::type to_wire(PayloadKind kind) {
  switch (kind) {
    case PayloadKind::Activation: return wire::FrameKind::ACTIVATION;
    case PayloadKind::Gradient: return wire::FrameKind::GRADIENT;
    case PayloadKind::TiedGradient: return wire::FrameKind::TIED_GRADIENT;
    case PayloadKind::Evaluation: return wire::FrameKind::EVALUATION;
    case PayloadKind::Control: return wire::FrameKind::CONTROL;
    case PayloadKind::Collective: return wire::FrameKind::COLLECTIVE;
  }
  PW_FAIL("payload kind " << static_cast<int>(kind) << " has no wire code");
}

}  // namespace pw::rpc
