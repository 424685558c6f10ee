// Element-wise arithmetic and deterministic reductions (sum, sum of squares) on CUDA.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

namespace pw::kernels::cuda {
namespace {

using detail::blocks_for;
using detail::kThreads;

// ---- kernels ------------------------------------------------------------------------------------

__global__ void add_kernel(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ y,
                           std::int64_t n) {
  PW_CUDA_KERNEL_LOOP(i, n) { y[i] = a[i] + b[i]; }
}

__global__ void axpy_kernel(float* dst, const float* src, float alpha, std::int64_t n) {
  PW_CUDA_KERNEL_LOOP(i, n) { dst[i] += alpha * src[i]; }
}

__global__ void scale_kernel(float* t, float alpha, std::int64_t n) {
  PW_CUDA_KERNEL_LOOP(i, n) { t[i] *= alpha; }
}

// Stage 1: each block reduces a grid-stride slice into partial[blockIdx.x], in double.
template <bool kSquare>
__global__ void partial_sum_kernel(const float* __restrict__ x, std::int64_t n, double* __restrict__ partial) {
  __shared__ double scratch[32];
  double acc = 0.0;
  PW_CUDA_KERNEL_LOOP(i, n) {
    const double v = x[i];
    acc += kSquare ? v * v : v;
  }
  acc = detail::block_sum(acc, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// Stage 2: one block adds the partials in a fixed order.
__global__ void final_sum_kernel(const double* __restrict__ partial, int count, double* __restrict__ out) {
  __shared__ double scratch[32];
  double acc = 0.0;
  for (int i = static_cast<int>(threadIdx.x); i < count; i += blockDim.x) acc += partial[i];
  acc = detail::block_sum(acc, scratch);
  if (threadIdx.x == 0) *out = acc;
}

// ---- launchers ----------------------------------------------------------------------------------

// Deterministic: the block count depends only on n, and both stages add in a fixed order.
template <bool kSquare>
double reduce_to_host(const Tensor& t, const char* what) {
  detail::require_f32(t, what);
  const Device dev = t.device();
  CudaDeviceGuard guard(dev.index);
  const std::int64_t n = t.numel();
  if (n == 0) return 0.0;
  constexpr int kMaxPartials = 1024;
  const int blocks = static_cast<int>(std::min<unsigned int>(blocks_for(n), kMaxPartials));
  Tensor buf = Tensor::empty({blocks + 1}, DType::F64, dev);
  double* partial = buf.data<double>();
  double* out = partial + blocks;
  const cudaStream_t stream = stream_of(dev);
  partial_sum_kernel<kSquare><<<blocks, kThreads, 0, stream>>>(t.data<float>(), n, partial);
  PW_CUDA_CHECK_LAUNCH();
  final_sum_kernel<<<1, 1024, 0, stream>>>(partial, blocks, out);
  PW_CUDA_CHECK_LAUNCH();
  double host = 0.0;
  PW_CUDA_CHECK(cudaMemcpyAsync(&host, out, sizeof(double), cudaMemcpyDeviceToHost, stream));
  PW_CUDA_CHECK(cudaStreamSynchronize(stream));
  return host;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  detail::require_f32(a, "add: a");
  detail::require_f32(b, "add: b");
  PW_CHECK(a.numel() == b.numel(), "add: " << a.describe() << " vs " << b.describe());
  const Device dev = a.device();
  CudaDeviceGuard guard(dev.index);
  Tensor y = Tensor::empty(a.shape(), DType::F32, dev);
  const std::int64_t n = a.numel();
  if (n == 0) return y;
  add_kernel<<<blocks_for(n), kThreads, 0, stream_of(dev)>>>(a.data<float>(), b.data<float>(), y.data<float>(), n);
  PW_CUDA_CHECK_LAUNCH();
  return y;
}

void add_inplace(Tensor& dst, const Tensor& src, double alpha) {
  detail::require_f32(dst, "add_inplace: dst");
  detail::require_f32(src, "add_inplace: src");
  PW_CHECK(dst.numel() == src.numel(), "add_inplace: " << dst.describe() << " += " << src.describe());
  const Device dev = dst.device();
  CudaDeviceGuard guard(dev.index);
  const std::int64_t n = dst.numel();
  if (n == 0) return;
  axpy_kernel<<<blocks_for(n), kThreads, 0, stream_of(dev)>>>(dst.data<float>(), src.data<float>(),
                                                              static_cast<float>(alpha), n);
  PW_CUDA_CHECK_LAUNCH();
}

void scale_inplace(Tensor& t, double alpha) {
  detail::require_f32(t, "scale_inplace: t");
  const Device dev = t.device();
  CudaDeviceGuard guard(dev.index);
  const std::int64_t n = t.numel();
  if (n == 0) return;
  scale_kernel<<<blocks_for(n), kThreads, 0, stream_of(dev)>>>(t.data<float>(), static_cast<float>(alpha), n);
  PW_CUDA_CHECK_LAUNCH();
}

double sum(const Tensor& t) { return reduce_to_host<false>(t, "sum: t"); }

double sum_of_squares(const Tensor& t) { return reduce_to_host<true>(t, "sum_of_squares: t"); }

}  // namespace pw::kernels::cuda
