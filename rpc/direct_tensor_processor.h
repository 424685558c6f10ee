#pragma once
// Serves TensorTransfer.deliver like the processor generated from pipewright.thrift (same bytes on
// the wire, same answers), but reads a frame's tensor bytes from the connection straight into a
// tensor, allocated from the frame's dtype and shape once its header passed check_frame_header:
// the bytes are copied once, into storage the CPU caching allocator reuses. The header fields are
// decoded with the protocol as the generated reader does. Frames that put their bytes before the
// header (no Thrift writer does) and protocols other than binary take the generated path: the
// bytes are read into the frame, then checked and copied by TensorTransferHandler::deliver.
#include <memory>

#include <thrift/TProcessor.h>

namespace pw::rpc {

class TensorTransferHandler;

class DirectTensorTransferProcessor : public apache::thrift::TProcessor {
 public:
  explicit DirectTensorTransferProcessor(std::shared_ptr<TensorTransferHandler> handler);
  bool process(std::shared_ptr<apache::thrift::protocol::TProtocol> in,
               std::shared_ptr<apache::thrift::protocol::TProtocol> out, void* connection_context) override;

 private:
  std::shared_ptr<TensorTransferHandler> handler_;
};

}  // namespace pw::rpc
