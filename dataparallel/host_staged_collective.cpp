#include "dataparallel/host_staged_collective.h"

#include "core/error.h"

namespace pw::dp {

HostStagedCollective::HostStagedCollective(std::unique_ptr<Collective> host, kernels::Device device)
    : host_(std::move(host)), device_(device) {
  PW_CHECK(host_ != nullptr, "a host-staged collective needs a host collective");
}

template <typename Op>
void HostStagedCollective::staged(kernels::Tensor& data, const char* what, Op op) {
  PW_CHECK(data.device() == device_, what << " of " << data.describe() << " on a collective of " << device_.str());
  kernels::Tensor host = data.to(kernels::Device::cpu());   // waits for the producer and the copy
  op(host);
  data.copy_from(host);
}

void HostStagedCollective::allreduce_sum(kernels::Tensor& data, Compression compression) {
  staged(data, "all-reduce", [&](kernels::Tensor& host) { host_->allreduce_sum(host, compression); });
}

void HostStagedCollective::broadcast(kernels::Tensor& data, int root) {
  staged(data, "broadcast", [&](kernels::Tensor& host) { host_->broadcast(host, root); });
}

void HostStagedCollective::reduce_scatter_sum(kernels::Tensor& data, Compression compression) {
  staged(data, "reduce-scatter", [&](kernels::Tensor& host) { host_->reduce_scatter_sum(host, compression); });
}

void HostStagedCollective::all_gather(kernels::Tensor& data) {
  staged(data, "all-gather", [&](kernels::Tensor& host) { host_->all_gather(host); });
}

}  // namespace pw::dp
