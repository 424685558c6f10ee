// Element-wise arithmetic and deterministic reductions (sum, sum of squares) on CUDA, for F32, BF16
// and F16 (16-bit values computed in float and rounded once per result; sums in double).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/vectorized.cuh"

namespace pw::kernels::cuda {
namespace {

using detail::blocks_for;
using detail::kThreads;
using detail::load;
using detail::store;

// ---- kernels ------------------------------------------------------------------------------------

// The residual add, in 16-byte packs (vectorized.cuh).
template <typename T>
struct AddOp {
  __device__ T operator()(T a, T b) const { return store<T>(load(a) + load(b)); }
};

template <typename T>
__global__ void axpy_kernel(T* dst, const T* src, float alpha, std::int64_t n) {
  PW_CUDA_KERNEL_LOOP(i, n) { dst[i] = store<T>(load(dst[i]) + alpha * load(src[i])); }
}

template <typename T>
__global__ void scale_kernel(T* t, float alpha, std::int64_t n) {
  PW_CUDA_KERNEL_LOOP(i, n) { t[i] = store<T>(load(t[i]) * alpha); }
}

// Stage 1: each block reduces a grid-stride slice into partial[blockIdx.x], in double.
template <typename T, bool kSquare>
__global__ void partial_sum_kernel(const T* __restrict__ x, std::int64_t n, double* __restrict__ partial) {
  __shared__ double scratch[32];
  double acc = 0.0;
  PW_CUDA_KERNEL_LOOP(i, n) {
    const double v = load(x[i]);
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
constexpr int kMaxPartials = 1024;
int partial_blocks(std::int64_t n) { return static_cast<int>(std::min<unsigned int>(blocks_for(n), kMaxPartials)); }

// Reduces t (n > 0) into *out through partial_blocks(n) partials, on `stream`.
template <bool kSquare>
void launch_reduction(const Tensor& t, double* partial, double* out, cudaStream_t stream, const char* what) {
  const std::int64_t n = t.numel();
  const int blocks = partial_blocks(n);
  detail::visit_cuda_float(t.dtype(), what, [&](auto tag) {
    using T = decltype(tag);
    partial_sum_kernel<T, kSquare><<<blocks, kThreads, 0, stream>>>(t.data<T>(), n, partial);
    PW_CUDA_CHECK_LAUNCH();
  });
  final_sum_kernel<<<1, 1024, 0, stream>>>(partial, blocks, out);
  PW_CUDA_CHECK_LAUNCH();
}

template <bool kSquare>
double reduce_to_host(const Tensor& t, const char* what) {
  detail::require_cuda_float(t, what);
  const Device dev = t.device();
  CudaDeviceGuard guard(dev.index);
  const std::int64_t n = t.numel();
  if (n == 0) return 0.0;
  const int blocks = partial_blocks(n);
  Tensor buf = Tensor::empty({blocks + 1}, DType::F64, dev);
  const cudaStream_t stream = stream_of(dev);
  launch_reduction<kSquare>(t, buf.data<double>(), buf.data<double>() + blocks, stream, what);
  double host = 0.0;
  PW_CUDA_CHECK(cudaMemcpyAsync(&host, buf.data<double>() + blocks, sizeof(double), cudaMemcpyDeviceToHost, stream));
  PW_CUDA_CHECK(cudaStreamSynchronize(stream));
  return host;
}

void require_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  PW_CHECK(a.dtype() == b.dtype(), "" << op << ": " << a.describe() << " and " << b.describe() << " differ in dtype");
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  detail::require_cuda_float(a, "add: a");
  detail::require_cuda_float(b, "add: b");
  require_same_dtype(a, b, "add");
  PW_CHECK(a.numel() == b.numel(), "add: " << a.describe() << " vs " << b.describe());
  const Device dev = a.device();
  CudaDeviceGuard guard(dev.index);
  Tensor y = Tensor::empty(a.shape(), a.dtype(), dev);
  const std::int64_t n = a.numel();
  if (n == 0) return y;
  detail::visit_cuda_float(a.dtype(), "add", [&](auto tag) {
    using T = decltype(tag);
    detail::launch_map2(a.data<T>(), b.data<T>(), y.data<T>(), n, AddOp<T>{}, stream_of(dev));
    PW_CUDA_CHECK_LAUNCH();
  });
  return y;
}

void add_inplace(Tensor& dst, const Tensor& src, double alpha) {
  detail::require_cuda_float(dst, "add_inplace: dst");
  detail::require_cuda_float(src, "add_inplace: src");
  require_same_dtype(dst, src, "add_inplace");
  PW_CHECK(dst.numel() == src.numel(), "add_inplace: " << dst.describe() << " += " << src.describe());
  const Device dev = dst.device();
  CudaDeviceGuard guard(dev.index);
  const std::int64_t n = dst.numel();
  if (n == 0) return;
  detail::visit_cuda_float(dst.dtype(), "add_inplace", [&](auto tag) {
    using T = decltype(tag);
    axpy_kernel<T><<<blocks_for(n), kThreads, 0, stream_of(dev)>>>(dst.data<T>(), src.data<T>(),
                                                                   static_cast<float>(alpha), n);
    PW_CUDA_CHECK_LAUNCH();
  });
}

void scale_inplace(Tensor& t, double alpha) {
  detail::require_cuda_float(t, "scale_inplace: t");
  const Device dev = t.device();
  CudaDeviceGuard guard(dev.index);
  const std::int64_t n = t.numel();
  if (n == 0) return;
  detail::visit_cuda_float(t.dtype(), "scale_inplace", [&](auto tag) {
    using T = decltype(tag);
    scale_kernel<T><<<blocks_for(n), kThreads, 0, stream_of(dev)>>>(t.data<T>(), static_cast<float>(alpha), n);
    PW_CUDA_CHECK_LAUNCH();
  });
}

double sum(const Tensor& t) { return reduce_to_host<false>(t, "sum: t"); }

double sum_of_squares(const Tensor& t) { return reduce_to_host<true>(t, "sum_of_squares: t"); }

// One buffer: each tensor's partials, then one result per tensor; one copy and one wait at the end.
std::vector<double> sums_of_squares(const std::vector<Tensor>& ts) {
  std::vector<double> out(ts.size(), 0.0);
  if (ts.empty()) return out;
  const Device dev = ts.front().device();
  CudaDeviceGuard guard(dev.index);
  std::int64_t partials = 0;
  for (const Tensor& t : ts) {
    detail::require_cuda_float(t, "sums_of_squares: ts[i]");
    PW_CHECK(t.device() == dev, "sums_of_squares: " << t.describe() << " is not on " << dev.str());
    if (t.numel() > 0) partials += partial_blocks(t.numel());
  }
  if (partials == 0) return out;
  const auto count = static_cast<std::int64_t>(ts.size());
  Tensor buf = Tensor::empty({partials + count}, DType::F64, dev);
  double* results = buf.data<double>() + partials;
  const cudaStream_t stream = stream_of(dev);
  std::int64_t offset = 0;
  for (std::int64_t i = 0; i < count; ++i) {
    const Tensor& t = ts[static_cast<std::size_t>(i)];
    if (t.numel() == 0) continue;
    launch_reduction<true>(t, buf.data<double>() + offset, results + i, stream, "sums_of_squares: ts[i]");
    offset += partial_blocks(t.numel());
  }
  std::vector<double> host(ts.size(), 0.0);
  PW_CUDA_CHECK(cudaMemcpyAsync(host.data(), results, ts.size() * sizeof(double), cudaMemcpyDeviceToHost, stream));
  PW_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (std::size_t i = 0; i < ts.size(); ++i)
    if (ts[i].numel() > 0) out[i] = host[i];   // the others were never written
  return out;
}

}  // namespace pw::kernels::cuda
