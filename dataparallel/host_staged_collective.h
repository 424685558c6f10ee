#pragma once
// A collective for GPU tensors through a CPU collective: each call copies the tensor to the host,
// runs the host collective there and copies the result back. For groups whose members share one
// physical GPU, which NCCL refuses ("Duplicate GPU"); slower than NCCL, correct everywhere.
#include <memory>

#include "dataparallel/collective.h"
#include "kernels/device.h"

namespace pw::dp {

class HostStagedCollective : public Collective {
 public:
  HostStagedCollective(std::unique_ptr<Collective> host, kernels::Device device);

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  void allreduce_sum(kernels::Tensor& data, Compression compression) override;
  void broadcast(kernels::Tensor& data, int root) override;
  void reduce_scatter_sum(kernels::Tensor& data, Compression compression) override;
  void all_gather(kernels::Tensor& data) override;
  void cancel() noexcept override { host_->cancel(); }

 private:
  template <typename Op>
  void staged(kernels::Tensor& data, const char* what, Op op);

  std::unique_ptr<Collective> host_;
  kernels::Device device_;
};

}  // namespace pw::dp
