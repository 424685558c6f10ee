// Embedding rows on CUDA: gather table[ids] and scatter-add gradient rows (atomicAdd, so repeated
// ids add up; the order of those additions is not fixed, unless the math mode asks for determinism:
// then each table element has one owning thread that adds its rows in id order). Ids outside
// [0, V) raise a device flag that the launcher reads back and turns into an error (that read waits
// for the stream).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/math_mode.h"

namespace pw::kernels::cuda {
namespace {

using detail::blocks_for;
using detail::kThreads;

// ---- kernels ------------------------------------------------------------------------------------

__global__ void embedding_gather_kernel(const float* __restrict__ table, const std::int64_t* __restrict__ ids,
                                        float* __restrict__ out, std::int64_t n, std::int64_t dim,
                                        std::int64_t vocab, int* bad) {
  const std::int64_t total = n * dim;
  PW_CUDA_KERNEL_LOOP(i, total) {
    const std::int64_t row = i / dim, d = i % dim;
    const std::int64_t id = ids[row];
    if (id < 0 || id >= vocab) {
      out[i] = 0.0f;
      *bad = 1;
    } else {
      out[i] = table[id * dim + d];
    }
  }
}

__global__ void embedding_scatter_add_kernel(float* grad_table, const std::int64_t* __restrict__ ids,
                                             const float* __restrict__ grad_rows, std::int64_t n, std::int64_t dim,
                                             std::int64_t vocab, int* bad) {
  const std::int64_t total = n * dim;
  PW_CUDA_KERNEL_LOOP(i, total) {
    const std::int64_t row = i / dim, d = i % dim;
    const std::int64_t id = ids[row];
    if (id < 0 || id >= vocab) {
      *bad = 1;
    } else {
      atomicAdd(grad_table + id * dim + d, grad_rows[i]);
    }
  }
}

// Deterministic variant: thread (owner, d) handles column d of the rows whose id % owners == owner,
// walking all n ids in order, so every element's sum has one fixed order.
constexpr int kDeterministicOwners = 64;
__global__ void embedding_scatter_add_ordered_kernel(float* grad_table, const std::int64_t* __restrict__ ids,
                                                     const float* __restrict__ grad_rows, std::int64_t n,
                                                     std::int64_t dim, std::int64_t vocab, int* bad) {
  const std::int64_t total = std::int64_t{kDeterministicOwners} * dim;
  PW_CUDA_KERNEL_LOOP(t, total) {
    const std::int64_t owner = t / dim, d = t % dim;
    for (std::int64_t row = 0; row < n; ++row) {
      const std::int64_t id = ids[row];
      if (id < 0 || id >= vocab) {
        *bad = 1;
      } else if (id % kDeterministicOwners == owner) {
        grad_table[id * dim + d] += grad_rows[row * dim + d];
      }
    }
  }
}

void check_ids(const Tensor& ids, Device dev, const char* op) {
  PW_CHECK(ids.dtype() == DType::I64 && ids.device() == dev && ids.ndim() == 1,
           "" << op << ": ids must be I64 [N] on " << dev.str() << ", got " << ids.describe());
}

}  // namespace

// ---- launchers ----------------------------------------------------------------------------------

Tensor embedding_gather(const Tensor& table, const Tensor& ids) {
  detail::require_f32(table, "embedding_gather: table");
  PW_CHECK(table.ndim() == 2, "embedding_gather: table must be [V, D], got " << table.describe());
  const Device dev = table.device();
  check_ids(ids, dev, "embedding_gather");
  CudaDeviceGuard guard(dev.index);
  const std::int64_t n = ids.numel(), vocab = table.dim(0), dim = table.dim(1);
  Tensor out = Tensor::empty({n, dim}, DType::F32, dev);
  if (n * dim == 0) return out;
  detail::DeviceFlag bad(dev);
  embedding_gather_kernel<<<blocks_for(n * dim), kThreads, 0, stream_of(dev)>>>(
      table.data<float>(), ids.data<std::int64_t>(), out.data<float>(), n, dim, vocab, bad.get());
  PW_CUDA_CHECK_LAUNCH();
  PW_CHECK(bad.read() == 0, "embedding_gather: ids out of range [0, " << vocab << ") for table " << table.describe());
  return out;
}

void embedding_scatter_add(Tensor& grad_table, const Tensor& ids, const Tensor& grad_rows) {
  detail::require_f32(grad_table, "embedding_scatter_add: grad_table");
  detail::require_f32(grad_rows, "embedding_scatter_add: grad_rows");
  PW_CHECK(grad_table.ndim() == 2, "embedding_scatter_add: grad_table must be [V, D], got " << grad_table.describe());
  const Device dev = grad_table.device();
  check_ids(ids, dev, "embedding_scatter_add");
  const std::int64_t n = ids.numel(), vocab = grad_table.dim(0), dim = grad_table.dim(1);
  PW_CHECK(grad_rows.numel() == n * dim, "embedding_scatter_add: grad_rows " << grad_rows.describe() << " for "
                                                                             << n << " ids of width " << dim);
  CudaDeviceGuard guard(dev.index);
  if (n * dim == 0) return;
  detail::DeviceFlag bad(dev);
  if (math_mode().determinism == Determinism::Deterministic) {
    embedding_scatter_add_ordered_kernel<<<blocks_for(kDeterministicOwners * dim), kThreads, 0, stream_of(dev)>>>(
        grad_table.data<float>(), ids.data<std::int64_t>(), grad_rows.data<float>(), n, dim, vocab, bad.get());
  } else {
    embedding_scatter_add_kernel<<<blocks_for(n * dim), kThreads, 0, stream_of(dev)>>>(
        grad_table.data<float>(), ids.data<std::int64_t>(), grad_rows.data<float>(), n, dim, vocab, bad.get());
  }
  PW_CUDA_CHECK_LAUNCH();
  PW_CHECK(bad.read() == 0, "embedding_scatter_add: ids out of range [0, " << vocab << ") for "
                                                                           << grad_table.describe());
}

}  // namespace pw::kernels::cuda
