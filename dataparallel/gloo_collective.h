#pragma once
// Collectives over Gloo's TCP transport for CPU tensors. The members meet through an rpc::Store
// (the rendezvous of a multi-process job, an InMemoryStore for replicas that are threads).
#include <chrono>
#include <memory>
#include <string>

#include "dataparallel/collective.h"
#include "rpc/store.h"

namespace gloo::rendezvous {
class Context;
}

namespace pw::dp {

class GlooCollective : public Collective {
 public:
  // Connects to every other member (all members construct theirs concurrently); the group's keys
  // live under `prefix` in the store. Every operation fails after `timeout` (naming the group).
  GlooCollective(int rank, int size, rpc::Store& store, std::string prefix, const std::string& bind_host,
                 std::chrono::milliseconds timeout);
  ~GlooCollective() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allreduce_sum(kernels::Tensor& data, Compression compression) override;
  void broadcast(kernels::Tensor& data, int root) override;
  void reduce_scatter_sum(kernels::Tensor& data, Compression compression) override;
  void all_gather(kernels::Tensor& data) override;
  void cancel() noexcept override;

 private:
  template <typename Op>
  void guarded(const char* what, Op op);

  int rank_;
  int size_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::uint32_t next_tag_ = 0;
};

}  // namespace pw::dp
