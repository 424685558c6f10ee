#pragma once
// The sending side towards one peer: a cached Thrift client connection, opened on first use and
// re-opened after a failure, with connect/send/receive timeouts taken from each call's deadline.
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "pw_thrift/TensorTransfer.h"
#include "rpc/host_port.h"
#include "rpc/transport.h"

namespace apache::thrift::transport {
class TSocket;
class TTransport;
}  // namespace apache::thrift::transport

namespace pw::rpc {

class PeerLink {
 public:
  PeerLink(int self_rank, int peer_rank, HostPort address);
  ~PeerLink();
  PeerLink(const PeerLink&) = delete;
  PeerLink& operator=(const PeerLink&) = delete;

  void set_address(HostPort address);   // drops the cached connection
  // Returns once the peer stored the frame. Throws TimeoutError when the peer cannot be reached or
  // does not answer before `deadline`, Error when it refuses the frame or drops the connection,
  // and whatever `throw_if_aborted` throws while waiting to connect.
  void deliver(const wire::TensorFrame& frame, const Tag& tag, Deadline deadline,
               const std::function<void()>& throw_if_aborted);

 private:
  void connect(const Tag& tag, Deadline deadline, const std::function<void()>& throw_if_aborted);
  void close() noexcept;
  std::string who() const;   // "rank 1 at 127.0.0.1:4242"

  int self_rank_;
  int peer_rank_;
  std::mutex mutex_;   // one frame at a time per connection
  HostPort address_;
  std::shared_ptr<apache::thrift::transport::TSocket> socket_;
  std::shared_ptr<apache::thrift::transport::TTransport> framed_;
  std::unique_ptr<wire::TensorTransferClient> client_;
};

}  // namespace pw::rpc
