#include "rpc/in_process_transport.h"


namespace pw::rpc {

namespace {
class InProcessTransport : public Transport {
 public:
  InProcessTransport(InProcessHub& hub, int rank) : hub_(hub), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return hub_.world_size(); }
  void send(int peer, const Tag& tag, const kernels::Tensor& tensor, Deadline) override {
    hub_.post(rank_, peer, tag, tensor);
  }
  kernels::Tensor recv(int peer, const Tag& tag, Deadline deadline) override {
    return hub_.take(peer, rank_, tag, deadline);
  }
  void abort(const std::string& reason) override { hub_.abort(reason); }

 private:
  InProcessHub& hub_;
  int rank_;
};
}  // namespace

InProcessHub::InProcessHub(int world_size) {
  PW_CHECK(world_size >= 1, "InProcessHub needs at least one rank, got " << world_size);
  for (int r = 0; r < world_size; ++r) mailboxes_.push_back(std::make_unique<Mailbox>(r));
}

std::unique_ptr<Transport> InProcessHub::endpoint(int rank) {
  mailbox(rank);
  return std::make_unique<InProcessTransport>(*this, rank);
}

Mailbox& InProcessHub::mailbox(int rank) {
  PW_CHECK(rank >= 0 && rank < world_size(), "rank " << rank << " outside a world of " << world_size());
  return *mailboxes_[static_cast<std::size_t>(rank)];
}

void InProcessHub::post(int from, int to, const Tag& tag, const kernels::Tensor& tensor) {
  const PostOutcome outcome = mailbox(to).post(from, tag, tensor);
  PW_CHECK(outcome != PostOutcome::Duplicate, "rank " << from << " sent the " << tag_str(tag) << " to rank " << to
                                                     << " twice");
}

kernels::Tensor InProcessHub::take(int from, int to, const Tag& tag, Deadline deadline) {
  return mailbox(to).take(from, tag, deadline);
}

void InProcessHub::abort(const std::string& reason) {
  for (auto& m : mailboxes_) m->abort(reason);
}

void InProcessHub::reset() {
  for (auto& m : mailboxes_) m->reset();
}

}  // namespace pw::rpc
