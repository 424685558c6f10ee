#pragma once
// Helpers shared by the CUDA op files: launch geometry, warp/block reductions, device flags.
#include <algorithm>
#include <cstdint>

#include <cuda_runtime.h>

#include "kernels/cuda/handles.h"
#include "kernels/cuda_check.h"
#include "kernels/stream.h"
#include "kernels/tensor.h"

namespace pw::kernels::cuda::detail {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = 65535;   // grid-stride loops cover the rest

// Blocks for a grid-stride loop over n elements.
inline unsigned int blocks_for(std::int64_t n, int threads = kThreads) {
  const std::int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned int>(std::clamp<std::int64_t>(b, 1, kMaxBlocks));
}

// Grid-stride loop index type: 64-bit so tensors over 2^31 elements work.
#define PW_CUDA_KERNEL_LOOP(i, n)                                                                    \
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<std::int64_t>(blockDim.x) * gridDim.x)

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

template <typename T>
__device__ __forceinline__ T warp_max(T v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `scratch` holds at least 32 values. Fixed order, so deterministic for a fixed launch shape.
template <typename T>
__device__ T block_sum(T v, T* scratch) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();   // scratch may still be read from a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : T(0);
  return warp_sum(v);
}

template <typename T>
__device__ T block_max(T v, T* scratch, T lowest) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : lowest;
  return warp_max(v);
}

// The CUDA backend is F32 only (F64 runs on CPU devices, for references).
inline void require_f32(const Tensor& t, const char* what) {
  PW_CHECK(t.dtype() == DType::F32, "" << what << ": the CUDA path supports F32 only, got " << t.describe());
  PW_CHECK(t.device().is_cuda(), "" << what << ": expected a CUDA tensor, got " << t.describe());
}

// A device-side error flag: kernels set it (atomicMax) when they meet bad input they cannot
// report otherwise, e.g. an index out of range; `read` waits for the stream and returns it.
class DeviceFlag {
 public:
  explicit DeviceFlag(Device device) : flag_(Tensor::zeros({1}, DType::I32, device)) {}
  int* get() const { return flag_.data<int>(); }
  int read() const {
    int host = 0;
    const cudaStream_t stream = stream_of(flag_.device());
    PW_CUDA_CHECK(cudaMemcpyAsync(&host, flag_.raw(), sizeof(int), cudaMemcpyDeviceToHost, stream));
    PW_CUDA_CHECK(cudaStreamSynchronize(stream));
    return host;
  }

 private:
  Tensor flag_;
};

}  // namespace pw::kernels::cuda::detail
