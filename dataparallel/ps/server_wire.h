#pragma once
// The server's side of the one parameter-server call whose request is large: a push is read by
// hand instead of through the generated ParameterServer_push_args, which reads the gradients into
// a std::string (a fresh allocation each call, zero-filled, then filled from the socket) and the
// keys one virtual readI64 at a time. Here the gradients come off the socket into a buffer the
// connection's thread keeps (no zero fill; its pages are faulted once, not per push) and the keys
// in one read, swapped from big-endian. The bytes on the wire and the answers are the generated
// processor's; every other call, and a push over any protocol but the binary one, takes the
// generated path.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pw_thrift/ParameterServer.h"

namespace pw::dp {

// One push as read off the wire; `grads` (grad_bytes long, aligned for floats) is valid during the
// call that receives it.
struct PushRequest {
  std::string job_token;
  std::string table;
  std::int32_t worker = 0;
  std::int64_t step = 0;
  const std::vector<std::int64_t>* keys = nullptr;
  const char* grads = nullptr;
  std::size_t grad_bytes = 0;
  std::int32_t part = 0, parts = 1;   // the IDL's defaults
  std::int64_t push_id = 0;
};

// Throws rpc::wire::PsError to answer with that error, anything else to answer with a
// TApplicationException carrying its message (as the generated processor does).
using PushReceiver = std::function<void(const PushRequest&)>;

class PsServerProcessor : public rpc::wire::ParameterServerProcessor {
 public:
  PsServerProcessor(std::shared_ptr<rpc::wire::ParameterServerIf> handler, PushReceiver push);

 protected:
  bool dispatchCall(apache::thrift::protocol::TProtocol* in, apache::thrift::protocol::TProtocol* out,
                    const std::string& name, std::int32_t seqid, void* call_context) override;

 private:
  PushReceiver push_;
};

}  // namespace pw::dp
