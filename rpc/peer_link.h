#pragma once
// The sending side towards one peer: a cached Thrift client connection, opened on first use and
// re-opened after a failure, with connect/send/receive timeouts taken from each call's deadline.
//
// Large frames are pipelined: deliver() returns once such a frame is written, without waiting for
// the peer's answer, so the peer stores one frame while the next is on its way. At most
// kUnansweredFrames are unanswered at once; their answers are read by later calls, and a refusal
// or a lost connection among them is thrown by the call that reads it, naming the refused frame's
// tag. Small frames wait for their own answer (and all earlier ones), so their errors are theirs.
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "pw_thrift/TensorTransfer.h"
#include "rpc/host_port.h"
#include "rpc/tls.h"
#include "rpc/transport.h"

namespace apache::thrift::transport {
class TSocket;
class TTransport;
}  // namespace apache::thrift::transport

namespace pw::rpc {

class PeerLink {
 public:
  // With `tls`, the connection is mutual TLS (rpc/tls.h).
  PeerLink(int self_rank, int peer_rank, HostPort address, Tls tls = {});
  PeerLink(const PeerLink&) = delete;
  PeerLink& operator=(const PeerLink&) = delete;

  static constexpr std::size_t kUnansweredFrames = 4;
  static constexpr std::size_t kPipelinedAtLeast = 256 * 1024;   // payload bytes

  // Waits (briefly) for the answers to pipelined frames, so that closing the connection cannot
  // discard frames the peer has not read yet.
  ~PeerLink();
  void set_address(HostPort address);   // drops the cached connection
  // Returns once the peer stored the frame, or for a frame of at least kPipelinedAtLeast bytes,
  // once it is written. Throws TimeoutError when the peer cannot be reached or does not answer
  // before `deadline`, Error when it refuses this or an earlier pipelined frame or drops the
  // connection, TlsError when the TLS handshake fails (not retried), and whatever
  // `throw_if_aborted` throws while waiting to connect.
  void deliver(const wire::TensorFrame& frame, const Tag& tag, Deadline deadline,
               const std::function<void()>& throw_if_aborted);
  // The same for the frame `header` with `data` as its tensor bytes (header.data is ignored): the
  // bytes go from `data` to the socket without a copy. They are only read while this call runs.
  void deliver(const wire::TensorFrame& header, std::span<const std::byte> data, const Tag& tag, Deadline deadline,
               const std::function<void()>& throw_if_aborted);
  // From any thread: shuts the connection down, so a deliver() blocked writing to a peer that
  // stopped reading (or waiting for its answer) returns at once; it then throws what
  // `throw_if_aborted` throws. Later deliveries connect again.
  void interrupt() noexcept;

 private:
  void connect(const Tag& tag, Deadline deadline, const std::function<void()>& throw_if_aborted);
  // Reads the oldest unanswered frame's answer; returns the refusal's message, if it was refused.
  std::string read_answer();
  void drain_answers() noexcept;
  void close() noexcept;
  std::string who() const;   // "rank 1 at 127.0.0.1:4242"
  std::string describe(const Tag& tag) const;   // "the <tag> from rank 0 to rank 1 at ..."

  int self_rank_;
  int peer_rank_;
  std::mutex mutex_;      // one frame at a time per connection
  std::mutex fd_mutex_;       // guards socket_fd_ and interrupted_ between interrupt() and the sender
  int socket_fd_ = -1;        // of the open connection, for interrupt()
  bool interrupted_ = false;  // the open connection was shut down: the next deliver() reconnects
  HostPort address_;
  Tls tls_;
  std::shared_ptr<apache::thrift::transport::TSocket> socket_;
  std::shared_ptr<apache::thrift::transport::TTransport> framed_;
  std::unique_ptr<wire::TensorTransferClient> client_;
  std::deque<Tag> unanswered_;   // written, answer not yet read; oldest first
};

}  // namespace pw::rpc
