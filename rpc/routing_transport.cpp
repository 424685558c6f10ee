#include "rpc/routing_transport.h"

#include <map>
#include <set>

namespace pw::rpc {

RoutingTransport::RoutingTransport(int rank, std::vector<Transport*> links) : rank_(rank), links_(std::move(links)) {
  PW_CHECK(rank_ >= 0 && rank_ < static_cast<int>(links_.size()),
           "rank " << rank_ << " outside a world of " << links_.size());
  for (std::size_t peer = 0; peer < links_.size(); ++peer)
    PW_CHECK(static_cast<int>(peer) == rank_ || links_[peer] != nullptr,
             "rank " << rank_ << " has no transport towards rank " << peer);
}

Transport& RoutingTransport::link(int peer) const {
  PW_CHECK(peer >= 0 && peer < world_size() && peer != rank_,
           "rank " << rank_ << " has no link to rank " << peer << " in a world of " << world_size());
  return *links_[static_cast<std::size_t>(peer)];
}

void RoutingTransport::send(int peer, const Tag& tag, const kernels::Tensor& tensor, Deadline deadline) {
  link(peer).send(peer, tag, tensor, deadline);
}

kernels::Tensor RoutingTransport::recv(int peer, const Tag& tag, Deadline deadline) {
  return link(peer).recv(peer, tag, deadline);
}

void RoutingTransport::abort(const std::string& reason) {
  std::set<Transport*> distinct(links_.begin(), links_.end());
  distinct.erase(nullptr);
  for (Transport* t : distinct) t->abort(reason);
}

void RoutingTransport::expect_frames(const std::vector<ExpectedFrame>& frames) {
  std::map<Transport*, std::vector<ExpectedFrame>> by_link;
  for (Transport* t : links_)
    if (t != nullptr) by_link[t];
  for (const auto& f : frames) by_link[&link(f.peer)].push_back(f);
  for (auto& [t, mine] : by_link) t->expect_frames(mine);
}

void RoutingTransport::begin_step(std::int64_t step) {
  std::set<Transport*> distinct(links_.begin(), links_.end());
  distinct.erase(nullptr);
  for (Transport* t : distinct) t->begin_step(step);
}

}  // namespace pw::rpc
