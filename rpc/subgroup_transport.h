#pragma once
// A view of some ranks of a transport as a world of their own: member i of the subgroup is
// world rank members[i]. One replica's pipeline sees its stages as ranks 0..P-1 this way.
#include <vector>

#include "rpc/transport.h"

namespace pw::rpc {

class SubgroupTransport : public Transport {
 public:
  SubgroupTransport(Transport& world, std::vector<int> members, int self);   // self: index into members

  int rank() const override { return self_; }
  int world_size() const override { return static_cast<int>(members_.size()); }
  void send(int peer, const Tag& tag, const kernels::Tensor& tensor, Deadline deadline) override;
  kernels::Tensor recv(int peer, const Tag& tag, Deadline deadline) override;
  void abort(const std::string& reason) override { world_.abort(reason); }
  void expect_frames(const std::vector<ExpectedFrame>& frames) override;   // peers as world ranks
  void begin_step(std::int64_t step) override { world_.begin_step(step); }

 private:
  int world_rank(int peer) const;
  Transport& world_;
  std::vector<int> members_;
  int self_;
};

}  // namespace pw::rpc
