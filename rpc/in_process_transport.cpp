#include "rpc/in_process_transport.h"

#include <sstream>

namespace pw::rpc {

std::string payload_kind_name(PayloadKind kind) {
  switch (kind) {
    case PayloadKind::Activation: return "activation";
    case PayloadKind::Gradient: return "gradient";
    case PayloadKind::TiedGradient: return "tied-weight gradient";
  }
  return "?";
}

std::string tag_str(const Tag& tag) {
  std::ostringstream out;
  if (tag.kind == PayloadKind::TiedGradient) {
    out << "tied-weight gradient of group " << tag.micro_batch << " from stage " << tag.virtual_stage;
  } else {
    out << payload_kind_name(tag.kind) << " of micro-batch " << tag.micro_batch << " for virtual stage "
        << tag.virtual_stage;
  }
  out << " (step " << tag.step << ")";
  return out.str();
}

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

InProcessHub::InProcessHub(int world_size) : world_size_(world_size) {
  PW_CHECK(world_size >= 1, "InProcessHub needs at least one rank, got " << world_size);
}

std::unique_ptr<Transport> InProcessHub::endpoint(int rank) {
  PW_CHECK(rank >= 0 && rank < world_size_, "rank " << rank << " outside a world of " << world_size_);
  return std::make_unique<InProcessTransport>(*this, rank);
}

InProcessHub::Key InProcessHub::key(int from, int to, const Tag& tag) {
  return {from, to, tag.step, tag.micro_batch, static_cast<int>(tag.kind), tag.virtual_stage};
}

void InProcessHub::post(int from, int to, const Tag& tag, const kernels::Tensor& tensor) {
  PW_CHECK(to >= 0 && to < world_size_, "rank " << from << " sent to rank " << to << " outside a world of "
                                                 << world_size_);
  {
    std::lock_guard lock(mutex_);
    const bool fresh = mailbox_.emplace(key(from, to, tag), tensor).second;
    PW_CHECK(fresh, "rank " << from << " sent the " << tag_str(tag) << " to rank " << to << " twice");
  }
  arrived_.notify_all();
}

kernels::Tensor InProcessHub::take(int from, int to, const Tag& tag, Deadline deadline) {
  std::unique_lock lock(mutex_);
  const Key k = key(from, to, tag);
  while (true) {
    if (aborted_) throw AbortedError(*aborted_);
    auto it = mailbox_.find(k);
    if (it != mailbox_.end()) {
      kernels::Tensor t = std::move(it->second);
      mailbox_.erase(it);
      return t;
    }
    if (arrived_.wait_until(lock, deadline) == std::cv_status::timeout) {
      if (aborted_) throw AbortedError(*aborted_);
      if (mailbox_.count(k) == 0)
        throw TimeoutError("rank " + std::to_string(to) + " timed out waiting for the " + tag_str(tag) +
                           " from rank " + std::to_string(from));
    }
  }
}

void InProcessHub::abort(const std::string& reason) {
  {
    std::lock_guard lock(mutex_);
    if (!aborted_) aborted_ = reason;
  }
  arrived_.notify_all();
}

void InProcessHub::reset() {
  std::lock_guard lock(mutex_);
  aborted_.reset();
  mailbox_.clear();
}

}  // namespace pw::rpc
