#include "rpc/thrift_transport.h"

#include <climits>
#include <span>

#include "rpc/direct_tensor_processor.h"
#include "rpc/frame_codec.h"
#include "rpc/host_port.h"
#include "rpc/job_token.h"
#include "rpc/peer_link.h"
#include "rpc/tensor_transfer_handler.h"
#include "rpc/thrift_server.h"

namespace pw::rpc {

namespace {
// Room for everything in a frame besides the tensor bytes (token, tag, shape, Thrift framing).
constexpr std::size_t kFrameHeaderAllowance = 64 * 1024;
}  // namespace

ThriftTransport::ThriftTransport(int rank, int world_size, const std::vector<std::string>& addresses,
                                 std::string job_token, ThriftTransportLimits limits, Tls tls)
    : rank_(rank), world_size_(world_size), job_token_(std::move(job_token)), limits_(limits), mailbox_(rank) {
  PW_INPUT_CHECK(world_size >= 1, "a Thrift transport needs at least one rank, got " << world_size);
  PW_INPUT_CHECK(rank >= 0 && rank < world_size, "rank " << rank << " outside a world of " << world_size);
  PW_INPUT_CHECK(addresses.size() == static_cast<std::size_t>(world_size),
                 "got " << addresses.size() << " rank addresses for a world of " << world_size);
  PW_INPUT_CHECK(limits.max_frame_bytes >= 1 && limits.max_frame_bytes <= INT_MAX - kFrameHeaderAllowance,
                 "maximum frame size " << limits.max_frame_bytes << " bytes; expected 1 to "
                                       << INT_MAX - kFrameHeaderAllowance);
  check_job_token(job_token_, "the job token");
  std::vector<HostPort> parsed;
  for (const auto& address : addresses) parsed.push_back(parse_host_port(address));

  handler_ = std::make_shared<TensorTransferHandler>(rank, FrameRules{job_token_, world_size, limits.max_frame_bytes},
                                                     mailbox_);
  for (int peer = 0; peer < world_size; ++peer) links_.push_back(std::make_unique<PeerLink>(rank, peer, parsed[peer], tls));
  // Reads each frame's tensor bytes straight from the socket into tensor storage, after the header passed the checks.
  server_ = std::make_unique<ThriftServer>(parsed[rank], std::make_shared<DirectTensorTransferProcessor>(handler_),
                                           limits.max_frame_bytes + kFrameHeaderAllowance, kDefaultMaxConnections,
                                           limits.gate, tls);
}

ThriftTransport::~ThriftTransport() {
  mailbox_.abort("rank " + std::to_string(rank_) + "'s transport was shut down");
  server_.reset();
}

std::string ThriftTransport::address() const { return server_->address().str(); }

const ConnectionGate& ThriftTransport::gate() const { return server_->gate(); }

void ThriftTransport::set_peer_address(int peer, const std::string& address) {
  check_peer(peer, "set the address of");
  links_[peer]->set_address(parse_host_port(address));
}

std::size_t ThriftTransport::refused_frames() const { return handler_->refused_frames(); }

void ThriftTransport::check_peer(int peer, const char* what) const {
  PW_CHECK(peer >= 0 && peer < world_size_,
           "rank " << rank_ << " cannot " << what << " rank " << peer << " outside a world of " << world_size_);
}

void ThriftTransport::send(int peer, const Tag& tag, const kernels::Tensor& tensor, Deadline deadline) {
  check_peer(peer, "send to");
  PW_CHECK(tensor.defined(), "rank " << rank_ << " cannot send an undefined tensor as the " << tag_str(tag));
  // `host` shares a CPU tensor's storage (a device tensor is copied) and keeps it alive while
  // deliver() writes its bytes straight to the socket; deliver() is done with them when it returns.
  const kernels::Tensor host = tensor.to(kernels::Device::cpu());
  PW_CHECK(host.nbytes() <= limits_.max_frame_bytes,
           "rank " << rank_ << " cannot send the " << tag_str(tag) << " to rank " << peer << ": " << host.nbytes()
                   << " bytes exceed the maximum frame size of " << limits_.max_frame_bytes);
  const wire::TensorFrame header = encode_frame_header(job_token_, rank_, tag, host);
  const std::span bytes(static_cast<const std::byte*>(host.raw()), host.nbytes());
  links_[peer]->deliver(header, bytes, tag, deadline, [this] {
    if (auto reason = mailbox_.abort_reason()) throw AbortedError(*reason);
  });
}

kernels::Tensor ThriftTransport::recv(int peer, const Tag& tag, Deadline deadline) {
  check_peer(peer, "receive from");
  return mailbox_.take(peer, tag, deadline);
}

void ThriftTransport::abort(const std::string& reason) {
  mailbox_.abort(reason);
  for (auto& link : links_)
    if (link) link->interrupt();   // a send blocked on a peer that stopped reading returns now
}

}  // namespace pw::rpc
