// libFuzzer target: arbitrary bytes -> Thrift-deserialised TensorFrame -> check_frame.
// Everything must end in a value or a clean exception; the sanitizers catch the rest.
// With PW_FUZZ_WRITE_SEED=<file> it writes one valid serialised frame there and exits (seed corpus).
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>

#include <thrift/TConfiguration.h>
#include <thrift/protocol/TBinaryProtocol.h>
#include <thrift/transport/TBufferTransports.h>

#include "rpc/frame_check.h"

namespace {

namespace thrift = apache::thrift;
constexpr std::size_t kMaxFrameBytes = 1 << 16;
const char* const kToken = "0123456789abcdef0123456789abcdef";

pw::rpc::FrameRules rules() { return {kToken, 4, kMaxFrameBytes}; }

std::shared_ptr<thrift::TConfiguration> limits() {
  const int limit = static_cast<int>(kMaxFrameBytes + 4096);
  return std::make_shared<thrift::TConfiguration>(limit, limit);
}

void write_seed(const char* path) {
  pw::rpc::wire::TensorFrame frame;
  frame.job_token = kToken;
  frame.source_rank = 1;
  frame.step = 2;
  frame.micro_batch = 3;
  frame.kind = pw::rpc::wire::FrameKind::GRADIENT;
  frame.virtual_stage = 1;
  frame.dtype = pw::rpc::wire::ElementType::F32;
  frame.shape = {2, 3};
  frame.data.assign(24, '\x01');
  auto buffer = std::make_shared<thrift::transport::TMemoryBuffer>(limits());
  thrift::protocol::TBinaryProtocol protocol(buffer);
  frame.write(&protocol);
  std::ofstream(path, std::ios::binary) << buffer->getBufferAsString();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* seed = std::getenv("PW_FUZZ_WRITE_SEED")) {
    write_seed(seed);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  auto buffer = std::make_shared<thrift::transport::TMemoryBuffer>(
      const_cast<std::uint8_t*>(data), static_cast<std::uint32_t>(size), thrift::transport::TMemoryBuffer::OBSERVE,
      limits());
  thrift::protocol::TBinaryProtocol protocol(buffer, static_cast<std::int32_t>(kMaxFrameBytes), 64, true, true);
  pw::rpc::wire::TensorFrame frame;
  try {
    frame.read(&protocol);
  } catch (const thrift::TException&) {
    return 0;
  }
  try {
    const pw::rpc::FrameHeader header = pw::rpc::check_frame(frame, rules());
    std::size_t elements = 1;
    for (const auto dim : header.shape) elements *= static_cast<std::size_t>(dim);
    if (elements * pw::kernels::dtype_size(header.dtype) != frame.data.size()) std::abort();   // check_frame's promise
  } catch (const pw::rpc::BadFrameError&) {
  }
  return 0;
}
