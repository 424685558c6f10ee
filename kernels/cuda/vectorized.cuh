#pragma once
// Element-wise maps over contiguous tensors in 16-byte accesses: each thread reads and writes a
// pack of 16 / sizeof(T) elements per iteration (8 BF16 / F16, 4 F32), which a memory-bound
// kernel needs to approach the device's bandwidth (2-byte accesses reached about a quarter of it on
// an H200). Packs need every pointer 16-byte aligned; the launchers check that and otherwise run
// the same kernel one element at a time. The op is applied to each element exactly as the scalar
// kernel would, so results are bit for bit the same either way.
#include <cstdint>

#include "kernels/cuda/common.cuh"

namespace pw::kernels::cuda::detail {

template <typename T, int N>
struct alignas(sizeof(T) * N) Pack {
  T v[N];
};

// y[i] = op(x[i]) for i < n; packs of N, then the n % N tail.
template <typename T, int N, typename Op>
__global__ void map1_kernel(const T* __restrict__ x, T* __restrict__ y, std::int64_t n, Op op) {
  const std::int64_t packs = n / N;
  const auto* xp = reinterpret_cast<const Pack<T, N>*>(x);
  auto* yp = reinterpret_cast<Pack<T, N>*>(y);
  PW_CUDA_KERNEL_LOOP(i, packs) {
    const Pack<T, N> a = xp[i];
    Pack<T, N> out;
#pragma unroll
    for (int k = 0; k < N; ++k) out.v[k] = op(a.v[k]);
    yp[i] = out;
  }
  const std::int64_t t = packs * N + static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < n) y[t] = op(x[t]);
}

// y[i] = op(a[i], b[i]) for i < n; y may be a (in-place updates read each element before writing it).
template <typename T, int N, typename Op>
__global__ void map2_kernel(const T* a, const T* b, T* y, std::int64_t n, Op op) {
  const std::int64_t packs = n / N;
  const auto* ap = reinterpret_cast<const Pack<T, N>*>(a);
  const auto* bp = reinterpret_cast<const Pack<T, N>*>(b);
  auto* yp = reinterpret_cast<Pack<T, N>*>(y);
  PW_CUDA_KERNEL_LOOP(i, packs) {
    const Pack<T, N> u = ap[i], w = bp[i];
    Pack<T, N> out;
#pragma unroll
    for (int k = 0; k < N; ++k) out.v[k] = op(u.v[k], w.v[k]);
    yp[i] = out;
  }
  const std::int64_t t = packs * N + static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t < n) y[t] = op(a[t], b[t]);
}

inline bool aligned_16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// Launches map1_kernel in packs when both pointers allow it, else element by element.
template <typename T, typename Op>
void launch_map1(const T* x, T* y, std::int64_t n, Op op, cudaStream_t stream) {
  constexpr int N = 16 / static_cast<int>(sizeof(T));
  if (aligned_16(x) && aligned_16(y)) {
    map1_kernel<T, N><<<blocks_for(n / N + 1), kThreads, 0, stream>>>(x, y, n, op);
  } else {
    map1_kernel<T, 1><<<blocks_for(n), kThreads, 0, stream>>>(x, y, n, op);
  }
}

template <typename T, typename Op>
void launch_map2(const T* a, const T* b, T* y, std::int64_t n, Op op, cudaStream_t stream) {
  constexpr int N = 16 / static_cast<int>(sizeof(T));
  if (aligned_16(a) && aligned_16(b) && aligned_16(y)) {
    map2_kernel<T, N><<<blocks_for(n / N + 1), kThreads, 0, stream>>>(a, b, y, n, op);
  } else {
    map2_kernel<T, 1><<<blocks_for(n), kThreads, 0, stream>>>(a, b, y, n, op);
  }
}

}  // namespace pw::kernels::cuda::detail
