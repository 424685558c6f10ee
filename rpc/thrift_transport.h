#pragma once
// Transport over TCP with Thrift: every rank serves TensorTransfer on its own address and sends
// to each peer through a cached client connection. Received tensors wait in a mailbox keyed by
// (source rank, tag), as in the in-process hub; received tensors are always on the CPU.
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "rpc/connection_gate.h"
#include "rpc/mailbox.h"
#include "rpc/tls.h"
#include "rpc/transport.h"

namespace pw::rpc {

class PeerLink;
class TensorTransferHandler;
class ThriftServer;

struct ThriftTransportLimits {
  std::size_t max_frame_bytes = std::size_t{1} << 30;   // tensor payload bytes in one frame
  GateLimits gate;                                       // admission of connections (rpc/connection_gate.h)
};

class ThriftTransport : public Transport {
 public:
  // Serves on addresses[rank] (loopback unless told otherwise; port 0: any free port, see
  // address()) and sends to addresses[peer]. Throws InputError for bad addresses, token or
  // limits, Error when the address cannot be bound.
  // With `tls`, links and the server are mutual TLS (rpc/tls.h).
  ThriftTransport(int rank, int world_size, const std::vector<std::string>& addresses, std::string job_token,
                  ThriftTransportLimits limits = {}, Tls tls = {});
  // Stops the server (interrupting open connections) and wakes local receivers; never waits on peers.
  ~ThriftTransport() override;
  ThriftTransport(const ThriftTransport&) = delete;
  ThriftTransport& operator=(const ThriftTransport&) = delete;

  std::string address() const;   // this rank's "host:port" with the bound port
  // For addresses learned after construction (peers that bound port 0).
  void set_peer_address(int peer, const std::string& address);
  std::size_t refused_frames() const;
  TensorTransferHandler& handler() { return *handler_; }   // for tests that feed frames directly
  const ConnectionGate& gate() const;                        // its server's admission counts

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  // Copies a device tensor to the host first. Throws TimeoutError / Error naming the peer's address.
  void send(int peer, const Tag& tag, const kernels::Tensor& tensor, Deadline deadline) override;
  kernels::Tensor recv(int peer, const Tag& tag, Deadline deadline) override;
  // Wakes this rank's pending and future receives with AbortedError (peers are not told).
  void abort(const std::string& reason) override;
  void reset() { mailbox_.reset(); }   // clears an abort and unclaimed messages (between steps)
  void expect_frames(const std::vector<ExpectedFrame>& frames) override { mailbox_.expect(frames); }
  void begin_step(std::int64_t step) override { mailbox_.begin_step(step); }

 private:
  void check_peer(int peer, const char* what) const;

  int rank_;
  int world_size_;
  std::string job_token_;
  ThriftTransportLimits limits_;
  Mailbox mailbox_;
  std::shared_ptr<TensorTransferHandler> handler_;
  std::vector<std::unique_ptr<PeerLink>> links_;
  std::unique_ptr<ThriftServer> server_;   // declared last: destroyed first, before what it serves into
};

}  // namespace pw::rpc
