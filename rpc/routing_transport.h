#pragma once
// One Transport over several: each peer's messages go over the transport chosen for that link
// (NCCL between two GPU ranks, Thrift otherwise). The transports are owned elsewhere.
#include <vector>

#include "rpc/transport.h"

namespace pw::rpc {

class RoutingTransport : public Transport {
 public:
  // links[peer] carries this rank's messages to and from `peer` (links[rank] is unused).
  RoutingTransport(int rank, std::vector<Transport*> links);

  int rank() const override { return rank_; }
  int world_size() const override { return static_cast<int>(links_.size()); }
  void send(int peer, const Tag& tag, const kernels::Tensor& tensor, Deadline deadline) override;
  kernels::Tensor recv(int peer, const Tag& tag, Deadline deadline) override;
  void abort(const std::string& reason) override;   // every distinct transport
  void expect_frames(const std::vector<ExpectedFrame>& frames) override;   // each link the frames of its peers
  void begin_step(std::int64_t step) override;   // every distinct transport

 private:
  Transport& link(int peer) const;
  int rank_;
  std::vector<Transport*> links_;
};

}  // namespace pw::rpc
