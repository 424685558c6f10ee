#pragma once
// Collectives over NCCL for GPU tensors (one GPU per member), on the device's current stream.
// Built only with CUDA; make_nccl_collective explains the missing build otherwise.
#include <chrono>
#include <memory>
#include <string>

#include "dataparallel/collective.h"
#include "kernels/device.h"
#include "rpc/store.h"

namespace pw::dp {

// Members meet through `store` under `key` (member 0 publishes the NCCL unique id). Every
// operation waits at most `timeout`, then aborts the communicator and throws TimeoutError.
std::unique_ptr<Collective> make_nccl_collective(int rank, int size, kernels::Device device, rpc::Store& store,
                                                 const std::string& key, std::chrono::milliseconds timeout);

}  // namespace pw::dp
