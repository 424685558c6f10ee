#pragma once
// Collectives over Gloo's TCP transport for CPU tensors. The members meet through an rpc::Store
// (the rendezvous of a multi-process job, an InMemoryStore for replicas that are threads).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "dataparallel/collective.h"
#include "rpc/store.h"

namespace gloo::rendezvous {
class Context;
}

namespace pw::dp {

struct GlooCollectiveOptions {
  // The reduce-scatter's ring moves segments in chunks of at most this many bytes (its scratch is
  // two chunks).
  std::size_t exchange_chunk_bytes = std::size_t{1} << 20;
  // All-reduces of at least this many bytes take the ring reduce-scatter, then an all-gather;
  // smaller ones Gloo's own all-reduce.
  std::size_t ring_min_bytes = std::size_t{256} << 10;
};

class GlooCollective : public Collective {
 public:
  // Connects to every other member (all members construct theirs concurrently); the group's keys
  // live under `prefix` in the store. Every operation fails after `timeout` (naming the group).
  GlooCollective(int rank, int size, rpc::Store& store, std::string prefix, const std::string& bind_host,
                 std::chrono::milliseconds timeout, GlooCollectiveOptions options = {});
  ~GlooCollective() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allreduce_sum(kernels::Tensor& data, Compression compression) override;
  void broadcast(kernels::Tensor& data, int root) override;
  void reduce_scatter_sum(kernels::Tensor& data, Compression compression) override;
  void all_gather(kernels::Tensor& data) override;
  void cancel() noexcept override;

 private:
  using SumFunction = void (*)(void*, const void*, const void*, std::size_t);
  // Gloo's own slot prefixes are 0x01-0x08 (gloo/types.h).
  static constexpr std::uint8_t kRingSlotPrefix = 0x50;

  template <typename Op>
  void guarded(const char* what, Op op);
  // The ring of gloo_collective.cpp over `n` elements of `element_bytes`: any n (segments of
  // ceil(n / R), the last ones shorter).
  void ring_reduce_scatter(void* data, std::size_t element_bytes, std::size_t n, SumFunction sum);

  int rank_;
  int size_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
  GlooCollectiveOptions options_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::uint32_t next_tag_ = 0;
};

}  // namespace pw::dp
