#pragma once
// Collectives among one stage's replicas: Gloo (TCP) for CPU tensors, NCCL for GPU tensors.
#include <memory>
#include <string>

#include "pipewright/enums.h"
#include "kernels/tensor.h"

namespace pw::dp {

// fp16 and bf16 halve the bytes on the wire; sums are then taken in that format, so the caller
// pre-divides by the group size before a compressed sum (BucketReducer does; see
// docs/data_parallel.md): fp16 then neither overflows on large gradients nor flushes small ones as
// a sum-then-divide would. bf16 has fp32's range and 8 bits of mantissa.
// Compression and its names: pipewright/enums.h.
Compression parse_compression(const std::string& text);   // "none", "fp16" or "bf16"; InputError otherwise
const char* compression_name(Compression c);

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;   // within the group
  virtual int size() const = 0;
  // Sums a flat F32 tensor (on the collective's device) over the group, in place.
  virtual void allreduce_sum(kernels::Tensor& data, Compression compression) = 0;
  // Every member's `data` becomes the root's.
  virtual void broadcast(kernels::Tensor& data, int root) = 0;
  // Sharded optimizers (ZeRO-1): `data` (flat, on the collective's device, the same element count
  // on every member, a multiple of size()) is cut into size() equal segments, segment r belonging
  // to member r.
  // reduce_scatter_sum: F32; member r's segment r becomes the sum over the group of every member's
  // segment r (compressed as allreduce_sum); the other segments hold unspecified values afterwards.
  virtual void reduce_scatter_sum(kernels::Tensor& data, Compression compression) = 0;
  // all_gather: any dtype; every member's segment r becomes member r's segment r, bit for bit.
  virtual void all_gather(kernels::Tensor& data) = 0;
  // Makes an operation in progress (on another thread) and every later one fail at once: the
  // group is unusable afterwards. Called when another replica failed.
  virtual void cancel() noexcept = 0;
};

}  // namespace pw::dp
