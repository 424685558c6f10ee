#include "rpc/subgroup_transport.h"

namespace pw::rpc {

SubgroupTransport::SubgroupTransport(Transport& world, std::vector<int> members, int self)
    : world_(world), members_(std::move(members)), self_(self) {
  PW_CHECK(self_ >= 0 && self_ < static_cast<int>(members_.size()), "subgroup member " << self_ << " of "
                                                                                         << members_.size());
  for (int m : members_) PW_CHECK(m >= 0 && m < world_.world_size(), "subgroup rank " << m << " outside the world");
  PW_CHECK(members_[static_cast<std::size_t>(self_)] == world_.rank(),
           "subgroup member " << self_ << " is world rank " << members_[static_cast<std::size_t>(self_)]
                              << ", not this rank " << world_.rank());
}

int SubgroupTransport::world_rank(int peer) const {
  PW_CHECK(peer >= 0 && peer < world_size(), "subgroup peer " << peer << " outside a group of " << world_size());
  return members_[static_cast<std::size_t>(peer)];
}

void SubgroupTransport::send(int peer, const Tag& tag, const kernels::Tensor& tensor, Deadline deadline) {
  world_.send(world_rank(peer), tag, tensor, deadline);
}

kernels::Tensor SubgroupTransport::recv(int peer, const Tag& tag, Deadline deadline) {
  return world_.recv(world_rank(peer), tag, deadline);
}

void SubgroupTransport::expect_frames(const std::vector<ExpectedFrame>& frames) {
  std::vector<ExpectedFrame> in_world = frames;
  for (auto& f : in_world) f.peer = world_rank(f.peer);
  world_.expect_frames(in_world);
}

}  // namespace pw::rpc
