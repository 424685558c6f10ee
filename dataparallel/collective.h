#pragma once
// Collectives among one stage's replicas: Gloo (TCP) for CPU tensors, NCCL for GPU tensors.
#include <memory>
#include <string>

#include "kernels/tensor.h"

namespace pw::dp {

// fp16 halves the bytes on the wire; sums are then taken in fp16 (bounded relative error, see
// docs/data_parallel.md).
enum class Compression { None, Fp16 };
Compression parse_compression(const std::string& text);   // "none" or "fp16"; InputError otherwise
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
  // Makes an operation in progress (on another thread) and every later one fail at once: the
  // group is unusable afterwards. Called when another replica failed.
  virtual void cancel() noexcept = 0;
};

}  // namespace pw::dp
