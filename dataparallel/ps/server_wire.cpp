#include "dataparallel/ps/server_wire.h"

#include <endian.h>

#include <thrift/TApplicationException.h>
#include <thrift/protocol/TBinaryProtocol.h>

#include "dataparallel/ps/limits.h"

namespace pw::dp {

namespace {

namespace protocol = apache::thrift::protocol;
using protocol::TProtocol;
using protocol::TProtocolException;
using protocol::TType;

// What a connection's thread keeps between pushes. A gradient buffer over this size (a push the
// client did not split, from a client built with other limits) is given back after its call.
constexpr std::size_t kKeptGradBytes = 2 * kPsChunkBytes;

struct PushBuffers {
  std::vector<std::int64_t> keys;
  std::unique_ptr<float[]> grads;   // uninitialised: every byte handed out was read off the wire
  std::size_t grad_capacity = 0;    // bytes

  char* grads_of(std::size_t bytes) {
    if (bytes > grad_capacity) {
      grads.reset();
      grads.reset(new float[(bytes + sizeof(float) - 1) / sizeof(float)]);
      grad_capacity = bytes;
    }
    return reinterpret_cast<char*>(grads.get());
  }
  void trim() {
    if (grad_capacity > kKeptGradBytes) {
      grads.reset();
      grad_capacity = 0;
    }
  }
};

void read_keys(TProtocol& in, std::vector<std::int64_t>& keys) {
  TType element;
  uint32_t size = 0;
  in.readListBegin(element, size);   // checks the container limit
  if (element != protocol::T_I64 && size > 0)
    throw TProtocolException(TProtocolException::INVALID_DATA, "push keys: a list of type " +
                                                                   std::to_string(element) + ", expected i64");
  const std::size_t bytes = std::size_t{size} * sizeof(std::int64_t);
  in.getTransport()->checkReadBytesAvailable(static_cast<long>(bytes));
  keys.resize(size);
  if (size > 0) in.getTransport()->readAll(reinterpret_cast<uint8_t*>(keys.data()), static_cast<uint32_t>(bytes));
  for (auto& k : keys) k = static_cast<std::int64_t>(be64toh(static_cast<std::uint64_t>(k)));
  in.readListEnd();
}

// The binary protocol's `binary`: an i32 length, then the bytes.
void read_grads(TProtocol& in, PushBuffers& buffers, PushRequest& request) {
  int32_t size = 0;
  in.readI32(size);
  if (size < 0) throw TProtocolException(TProtocolException::NEGATIVE_SIZE);
  in.getTransport()->checkReadBytesAvailable(size);   // never allocate for bytes the frame cannot hold
  char* data = buffers.grads_of(static_cast<std::size_t>(size));
  if (size > 0) in.getTransport()->readAll(reinterpret_cast<uint8_t*>(data), static_cast<uint32_t>(size));
  request.grads = data;
  request.grad_bytes = static_cast<std::size_t>(size);
}

template <typename T, typename ReadFn>
void read_field(TType type, TType expected, TProtocol& in, T& value, ReadFn read) {
  if (type == expected) (in.*read)(value);
  else in.skip(type);
}

// ParameterServer_push_args as the generated reader reads it: fields in any order, a field of
// another type skipped, a missing one left at its default.
void read_push(TProtocol& in, PushBuffers& buffers, PushRequest& request) {
  buffers.keys.clear();
  request.keys = &buffers.keys;
  std::string name;
  TType type;
  int16_t id = 0;
  in.readStructBegin(name);
  while (true) {
    in.readFieldBegin(name, type, id);
    if (type == protocol::T_STOP) break;
    switch (id) {
      case 1: read_field(type, protocol::T_STRING, in, request.job_token, &TProtocol::readString); break;
      case 2: read_field(type, protocol::T_STRING, in, request.table, &TProtocol::readString); break;
      case 3: read_field(type, protocol::T_I32, in, request.worker, &TProtocol::readI32); break;
      case 4: read_field(type, protocol::T_I64, in, request.step, &TProtocol::readI64); break;
      case 5:
        if (type == protocol::T_LIST) read_keys(in, buffers.keys);
        else in.skip(type);
        break;
      case 6:
        if (type == protocol::T_STRING) read_grads(in, buffers, request);
        else in.skip(type);
        break;
      case 7: read_field(type, protocol::T_I32, in, request.part, &TProtocol::readI32); break;
      case 8: read_field(type, protocol::T_I32, in, request.parts, &TProtocol::readI32); break;
      case 9: read_field(type, protocol::T_I64, in, request.push_id, &TProtocol::readI64); break;
      default: in.skip(type);
    }
    in.readFieldEnd();
  }
  in.readStructEnd();
}

}  // namespace

PsServerProcessor::PsServerProcessor(std::shared_ptr<rpc::wire::ParameterServerIf> handler, PushReceiver push)
    : ParameterServerProcessor(std::move(handler)), push_(std::move(push)) {}

bool PsServerProcessor::dispatchCall(TProtocol* in, TProtocol* out, const std::string& name, std::int32_t seqid,
                                     void* call_context) {
  if (name != "push" || dynamic_cast<protocol::TBinaryProtocol*>(in) == nullptr)
    return ParameterServerProcessor::dispatchCall(in, out, name, seqid, call_context);
  thread_local PushBuffers buffers;
  struct Trim {
    PushBuffers& b;
    ~Trim() { b.trim(); }
  } trim{buffers};
  PushRequest request;
  read_push(*in, buffers, request);
  in->readMessageEnd();
  in->getTransport()->readEnd();

  rpc::wire::ParameterServer_push_result result;
  try {
    push_(request);
  } catch (rpc::wire::PsError& error) {
    result.error = std::move(error);
    result.__isset.error = true;
  } catch (const std::exception& e) {
    const apache::thrift::TApplicationException x(e.what());
    out->writeMessageBegin("push", protocol::T_EXCEPTION, seqid);
    x.write(out);
    out->writeMessageEnd();
    out->getTransport()->writeEnd();
    out->getTransport()->flush();
    return true;
  }
  out->writeMessageBegin("push", protocol::T_REPLY, seqid);
  result.write(out);
  out->writeMessageEnd();
  out->getTransport()->writeEnd();
  out->getTransport()->flush();
  return true;
}

}  // namespace pw::dp
