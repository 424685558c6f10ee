#include "rpc/direct_tensor_processor.h"

#include <algorithm>
#include <atomic>
#include <array>
#include <optional>
#include <vector>

#include <thrift/TApplicationException.h>
#include <thrift/TOutput.h>
#include <thrift/protocol/TBinaryProtocol.h>

#include "core/host_pages.h"
#include "kernels/allocator.h"
#include "kernels/runtime.h"
#include "rpc/connection_gate.h"
#include "rpc/tensor_transfer_handler.h"

namespace pw::rpc {

namespace {

namespace protocol = apache::thrift::protocol;
using apache::thrift::TApplicationException;
using protocol::TProtocol;
using protocol::TType;

constexpr std::size_t kSkipChunk = 64 * 1024;
constexpr int16_t kDataField = 9;

// One deliver call as read so far.
struct Incoming {
  wire::TensorFrame frame;   // header fields; `data` only on the generated path
  std::array<bool, kDataField> seen{};   // header fields 1..8 read
  std::optional<ReceivedFrame> direct;   // the tensor the bytes were read into
  std::string refusal;                   // why the header was refused before its bytes were read
  std::string rejected;                  // a refusal the handler already counted and logged (out of turn)
  bool header_complete() const { return std::all_of(seen.begin() + 1, seen.end(), [](bool s) { return s; }); }
};

// A connection reads its next frame while the stage still holds the last one, so frames of one size
// take at least two blocks in turn. The first large frame of a size on a connection reserves the
// second block as well, so that it is not mapped, and faulted in, later while a frame waits to be
// read (a fresh 64 MiB block took 100-146 ms on a VM whose host backs memory on first touch). A
// third block, where the stage holds two frames, is still mapped when needed. One-off huge frames
// reserve nothing, and the process reserves at most kReservedAtMost bytes this way.
void reserve_the_next_buffer(std::size_t bytes) noexcept {
  constexpr std::size_t kReserveUpTo = std::size_t{256} << 20;
  constexpr std::int64_t kReservedAtMost = std::int64_t{1} << 30;
  constexpr std::size_t kSizesRemembered = 16;
  static std::atomic<std::int64_t> reserved_bytes{0};
  if (bytes < kHugePageBytes || bytes > kReserveUpTo) return;   // small blocks come from malloc's heap
  thread_local std::vector<std::size_t> reserved;   // this connection's sizes, the latest last
  const auto n = static_cast<std::int64_t>(bytes);
  try {
    if (std::find(reserved.begin(), reserved.end(), bytes) != reserved.end()) return;
    const bool done = reserved_bytes.fetch_add(n) + n <= kReservedAtMost &&
                      kernels::DeviceRuntime::get(kernels::Device::cpu()).allocator().reserve(bytes);
    if (!done) {   // over the budget or the cap, or out of memory: tried again by the next frame of the size
      reserved_bytes.fetch_sub(n);
      return;
    }
    if (reserved.size() == kSizesRemembered) reserved.erase(reserved.begin());
    reserved.push_back(bytes);
  } catch (...) {   // a hint: the frame is read all the same
  }
}

void skip_bytes(apache::thrift::transport::TTransport& transport, std::size_t n) {
  std::vector<uint8_t> scratch(std::min(n, kSkipChunk));
  while (n > 0) {
    const auto chunk = static_cast<uint32_t>(std::min(n, scratch.size()));
    transport.readAll(scratch.data(), chunk);
    n -= chunk;
  }
}

// Field 9 of a frame whose header is complete, in the binary protocol's encoding of `binary`
// (an i32 length, then the bytes): checked first, then read into the tensor or skipped.
void read_bytes_direct(TProtocol& in, Incoming& incoming, TensorTransferHandler& handler) {
  int32_t size = 0;
  in.readI32(size);
  if (size < 0) throw protocol::TProtocolException(protocol::TProtocolException::NEGATIVE_SIZE);
  auto& transport = *in.getTransport();
  transport.checkReadBytesAvailable(size);   // never allocate for bytes the message cannot hold
  ReceivedFrame received;
  try {
    const FrameHeader header = check_frame_header(incoming.frame, static_cast<std::size_t>(size), handler.rules());
    mark_connection_proven();
    handler.check_turn(header.source_rank, header.tag);   // out of turn: its bytes are skipped, not stored
    received.source_rank = header.source_rank;
    received.tag = header.tag;
    kernels::MemoryKindScope kind(kernels::MemoryKind::Communication);
    received.tensor = kernels::Tensor::empty(header.shape, header.dtype, kernels::Device::cpu());
    reserve_the_next_buffer(static_cast<std::size_t>(size));
  } catch (const BadFrameError& e) {
    incoming.refusal = e.what();
  } catch (const wire::FrameRejected& rejected) {   // out of turn: already counted, logged and failed
    incoming.rejected = rejected.reason;
  } catch (const std::exception& e) {   // e.g. out of memory for a frame that passed the size checks
    incoming.refusal = std::string("could not store the frame: ") + e.what();
  }
  if (!incoming.refusal.empty() || !incoming.rejected.empty()) return skip_bytes(transport, static_cast<std::size_t>(size));
  if (size > 0) transport.readAll(static_cast<uint8_t*>(received.tensor.raw()), static_cast<uint32_t>(size));
  incoming.direct = std::move(received);
}

template <typename T, typename ReadFn>
void read_field(TType type, TType expected, TProtocol& in, T& value, ReadFn read) {
  if (type == expected) (in.*read)(value);
  else in.skip(type);
}

void read_frame(TProtocol& in, Incoming& incoming, TensorTransferHandler& handler) {
  auto& f = incoming.frame;
  std::string name;
  TType type;
  int16_t id = 0;
  in.readStructBegin(name);
  while (true) {
    in.readFieldBegin(name, type, id);
    if (type == protocol::T_STOP) break;
    const bool after_direct = incoming.direct || !incoming.refusal.empty() || !incoming.rejected.empty();
    if (after_direct && id >= 1 && id <= kDataField && incoming.refusal.empty() && incoming.rejected.empty())
      incoming.refusal = "field " + std::to_string(id) + " of the frame repeated after its tensor bytes";
    switch (id) {
      case 1: read_field(type, protocol::T_STRING, in, f.job_token, &TProtocol::readString); break;
      case 2: read_field(type, protocol::T_I32, in, f.source_rank, &TProtocol::readI32); break;
      case 3: read_field(type, protocol::T_I64, in, f.step, &TProtocol::readI64); break;
      case 4: read_field(type, protocol::T_I32, in, f.micro_batch, &TProtocol::readI32); break;
      case 5: read_field(type, protocol::T_I32, in, f.kind, &TProtocol::readI32); break;
      case 6: read_field(type, protocol::T_I32, in, f.virtual_stage, &TProtocol::readI32); break;
      case 7: read_field(type, protocol::T_I32, in, f.dtype, &TProtocol::readI32); break;
      case 8:
        if (type == protocol::T_LIST) {
          TType element;
          uint32_t size = 0;
          in.readListBegin(element, size);
          f.shape.resize(size);
          for (auto& dim : f.shape) in.readI64(dim);
          in.readListEnd();
        } else {
          in.skip(type);
        }
        break;
      case kDataField:
        if (type != protocol::T_STRING) in.skip(type);
        else if (!after_direct && incoming.header_complete() && dynamic_cast<protocol::TBinaryProtocol*>(&in))
          read_bytes_direct(in, incoming, handler);
        else if (after_direct) in.skip(type);
        else in.readBinary(f.data);
        break;
      default: in.skip(type);
    }
    if (id >= 1 && id < kDataField && type != protocol::T_STOP) incoming.seen[id] = true;
    in.readFieldEnd();
  }
  in.readStructEnd();
}

void read_args(TProtocol& in, Incoming& incoming, TensorTransferHandler& handler) {
  std::string name;
  TType type;
  int16_t id = 0;
  in.readStructBegin(name);
  while (true) {
    in.readFieldBegin(name, type, id);
    if (type == protocol::T_STOP) break;
    if (id == 1 && type == protocol::T_STRUCT) read_frame(in, incoming, handler);
    else in.skip(type);
    in.readFieldEnd();
  }
  in.readStructEnd();
}

void reply_exception(TProtocol& out, const std::string& method, int32_t seqid, const TApplicationException& x) {
  out.writeMessageBegin(method, protocol::T_EXCEPTION, seqid);
  x.write(&out);
  out.writeMessageEnd();
  out.getTransport()->writeEnd();
  out.getTransport()->flush();
}

}  // namespace

DirectTensorTransferProcessor::DirectTensorTransferProcessor(std::shared_ptr<TensorTransferHandler> handler)
    : handler_(std::move(handler)) {}

bool DirectTensorTransferProcessor::process(std::shared_ptr<TProtocol> in, std::shared_ptr<TProtocol> out,
                                            void* /*connection_context*/) {
  std::string method;
  protocol::TMessageType type;
  int32_t seqid = 0;
  in->readMessageBegin(method, type, seqid);
  if (type != protocol::T_CALL && type != protocol::T_ONEWAY) {
    apache::thrift::GlobalOutput.printf("received invalid message type %d from client", type);
    return false;
  }
  if (method != "deliver") {
    in->skip(protocol::T_STRUCT);
    in->readMessageEnd();
    in->getTransport()->readEnd();
    reply_exception(*out, method, seqid,
                    TApplicationException(TApplicationException::UNKNOWN_METHOD, "Invalid method name: '" + method + "'"));
    return true;
  }
  Incoming incoming;
  read_args(*in, incoming, *handler_);
  in->readMessageEnd();
  in->getTransport()->readEnd();

  wire::TensorTransfer_deliver_result result;
  try {
    if (!incoming.rejected.empty()) {
      wire::FrameRejected rejected;
      rejected.reason = incoming.rejected;
      throw rejected;
    }
    if (!incoming.refusal.empty()) handler_->refuse(incoming.frame.source_rank, incoming.refusal);
    if (incoming.direct) handler_->store(std::move(*incoming.direct));
    else handler_->deliver(incoming.frame);
  } catch (wire::FrameRejected& rejected) {
    result.rejected = std::move(rejected);
    result.__isset.rejected = true;
  } catch (const std::exception& e) {
    reply_exception(*out, "deliver", seqid, TApplicationException(e.what()));
    return true;
  }
  out->writeMessageBegin("deliver", protocol::T_REPLY, seqid);
  result.write(out.get());
  out->writeMessageEnd();
  out->getTransport()->writeEnd();
  out->getTransport()->flush();
  return true;
}

}  // namespace pw::rpc
