// Spatial batch normalisation on CUDA through cuDNN's batch-norm API (CUDNN_BATCHNORM_SPATIAL).
// cuDNN matches the contract: running = (1 - momentum) * running + momentum * batch with the
// unbiased batch variance for running_var, and save_mean / save_invstd = 1 / sqrt(var + eps)
// (biased batch variance) for backward. [N, C] inputs are treated as [N, C, 1, 1].
//
// BF16 and F16 data run in own kernels (cuDNN's legacy batch norm takes no BF16, and converting the
// activations to F32 and back cost more than the normalisation): per-channel sums in double in a
// fixed order (deterministic), the element-wise parts in float, each 16-bit result rounded once, as
// the F32 path rounded to 16 bits gives. Per-channel tensors (gamma, beta, statistics, their
// gradients) are F32 for every data type.
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/ops.h"
#include "kernels/cuda/vectorized.cuh"

namespace pw::kernels::cuda {
namespace {

// x's descriptor and the derived [1, C, 1, 1] descriptor for the per-channel tensors.
struct BnDescriptors {
  TensorDescriptor x;
  TensorDescriptor channel;
  std::int64_t channels = 0;

  explicit BnDescriptors(const Tensor& t) {
    PW_CHECK(t.ndim() == 4 || t.ndim() == 2, "batch_norm: x must be [N, C, H, W] or [N, C], got " << t.describe());
    const std::int64_t n = t.dim(0), c = t.dim(1);
    const std::int64_t h = t.ndim() == 4 ? t.dim(2) : 1;
    const std::int64_t w = t.ndim() == 4 ? t.dim(3) : 1;
    channels = c;
    if (t.numel() == 0) return;   // cuDNN rejects empty tensors; callers handle them without it
    x.set_nchw(n, c, h, w);
    PW_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(channel.get(), x.get(), CUDNN_BATCHNORM_SPATIAL));
  }
};

void require_channel_tensor(const Tensor& t, std::int64_t channels, const char* what) {
  detail::require_f32(t, what);
  PW_CHECK(t.numel() == channels, "" << what << " must have " << channels << " values, got " << t.describe());
}

// ---- kernels for 16-bit data --------------------------------------------------------------------

using detail::load;
using detail::store;

// x viewed as [N, C, P] (P = H * W, 1 for [N, C]).
struct BnGeometry {
  std::int64_t batch = 0, channels = 0, plane = 0;
  explicit BnGeometry(const Tensor& t)
      : batch(t.dim(0)), channels(t.dim(1)), plane(t.ndim() == 4 ? t.dim(2) * t.dim(3) : 1) {}
  std::int64_t per_channel() const { return batch * plane; }
};

// Per-channel reductions in two passes, for determinism without atomics: blocks of kBnThreads,
// block (split, c) sums the rows [batch * split / splits, batch * (split + 1) / splits) of channel
// c into a pair of doubles; then one thread a channel adds its splits' pairs in order. Splitting a
// channel over several blocks keeps every multiprocessor busy at 64 channels (one block a channel
// read at 0.34 TB/s on an H200). A block is laid out as rows x lanes, lanes = 2^lane_shift threads
// over a plane's packs and rows over the images, so that small planes (7 x 7) keep every thread
// busy without a division per element.
constexpr int kBnThreads = 512;

int lane_shift_for(std::int64_t packs) {
  int shift = 0;
  while ((std::int64_t{1} << shift) < packs && (1 << shift) < kBnThreads) ++shift;
  return shift;
}

// Splits of a channel: about 1024 blocks in all, at least 16 K values a block, at most one image a
// split. With the pack width (from the shape and the pointers' alignment, which fresh tensors all
// have) it fixes the sums' order, so every run gives the same bits.
int splits_for(const BnGeometry& g) {
  const std::int64_t wanted = (1024 + g.channels - 1) / g.channels;
  const std::int64_t by_work = std::max<std::int64_t>(1, g.per_channel() / 16384);
  return static_cast<int>(std::clamp<std::int64_t>(std::min(wanted, by_work), 1, std::max<std::int64_t>(g.batch, 1)));
}

// Elements a thread loads at once: the widest of 16, 8 and 4 bytes that a plane's length and every
// pointer's alignment allow (a plane's start is then aligned too), else 1.
template <typename T>
int pack_elements(std::int64_t plane, std::initializer_list<const void*> pointers) {
  for (const int bytes : {16, 8, 4}) {
    const int n = bytes / static_cast<int>(sizeof(T));
    if (n < 2 || plane % n != 0) continue;
    bool aligned = true;
    for (const void* p : pointers) aligned = aligned && reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
    if (aligned) return n;
  }
  return 1;
}

// Calls body(std::integral_constant<int, N>{}) for the pack width n (1, 2, 4 or 8).
template <typename Body>
void with_pack(int n, Body&& body) {
  switch (n) {
    case 8: return body(std::integral_constant<int, 8>{});
    case 4: return body(std::integral_constant<int, 4>{});
    case 2: return body(std::integral_constant<int, 2>{});
    default: return body(std::integral_constant<int, 1>{});
  }
}

template <typename T, int N>
using Pack = detail::Pack<T, N>;

// What the first pass sums: (x, x^2) for the statistics, (dy, dy * (x - mean)) for the backward.
enum class BnSums { Statistics, Backward };

template <typename T, int N, BnSums kSums>
__global__ void bn_partial_sums_kernel(const T* __restrict__ x, const T* __restrict__ dy, std::int64_t batch,
                                       std::int64_t channels, std::int64_t plane, int splits, int lane_shift,
                                       const float* __restrict__ mean, double* __restrict__ partial) {
  __shared__ double scratch[32];
  const int lanes = 1 << lane_shift, rows = blockDim.x >> lane_shift;
  const int lane = static_cast<int>(threadIdx.x) & (lanes - 1), row = static_cast<int>(threadIdx.x) >> lane_shift;
  const std::int64_t packs = plane / N;
  const int split = static_cast<int>(blockIdx.x);
  const std::int64_t first = batch * split / splits, last = batch * (split + 1) / splits;
  for (std::int64_t c = blockIdx.y; c < channels; c += gridDim.y) {
    const double m = kSums == BnSums::Backward ? static_cast<double>(mean[c]) : 0.0;
    double a = 0.0, b = 0.0;
    for (std::int64_t n = first + row; n < last; n += rows) {
      const std::int64_t base = (n * channels + c) * plane;
      const auto* xp = reinterpret_cast<const Pack<T, N>*>(x + base);
      for (std::int64_t j = lane; j < packs; j += lanes) {
        const Pack<T, N> xv = xp[j];
        if constexpr (kSums == BnSums::Statistics) {
#pragma unroll
          for (int k = 0; k < N; ++k) {
            const double v = load(xv.v[k]);
            a += v;
            b += v * v;
          }
        } else {
          const Pack<T, N> gv = reinterpret_cast<const Pack<T, N>*>(dy + base)[j];
#pragma unroll
          for (int k = 0; k < N; ++k) {
            const double g = load(gv.v[k]);
            a += g;
            b += g * (static_cast<double>(load(xv.v[k])) - m);
          }
        }
      }
    }
    a = detail::block_sum(a, scratch);
    b = detail::block_sum(b, scratch);
    if (threadIdx.x == 0) {
      partial[(c * splits + split) * 2] = a;
      partial[(c * splits + split) * 2 + 1] = b;
    }
  }
}

// Mean and biased variance per channel from its splits' sums (in order), then save_mean,
// save_invstd and the running statistics (unbiased variance), as cuDNN does for F32.
__global__ void bn_statistics_finalize_kernel(const double* __restrict__ partial, int splits, std::int64_t channels,
                                              double count, double momentum, double eps,
                                              float* __restrict__ running_mean, float* __restrict__ running_var,
                                              float* __restrict__ save_mean, float* __restrict__ save_invstd) {
  PW_CUDA_KERNEL_LOOP(c, channels) {
    double sum = 0.0, squares = 0.0;
    for (int s = 0; s < splits; ++s) {
      sum += partial[(c * splits + s) * 2];
      squares += partial[(c * splits + s) * 2 + 1];
    }
    const double mean = sum / count;
    const double var = fmax(squares / count - mean * mean, 0.0);
    const double unbiased = count > 1.0 ? var * count / (count - 1.0) : var;
    save_mean[c] = static_cast<float>(mean);
    save_invstd[c] = static_cast<float>(1.0 / sqrt(var + eps));
    running_mean[c] = static_cast<float>((1.0 - momentum) * running_mean[c] + momentum * mean);
    running_var[c] = static_cast<float>((1.0 - momentum) * running_var[c] + momentum * unbiased);
  }
}

// grad_beta = sum(dy), grad_gamma = sum(dy * (x - mean)) * invstd (written).
__global__ void bn_backward_finalize_kernel(const double* __restrict__ partial, int splits, std::int64_t channels,
                                            const float* __restrict__ invstd, float* __restrict__ grad_gamma,
                                            float* __restrict__ grad_beta) {
  PW_CUDA_KERNEL_LOOP(c, channels) {
    double sum_dy = 0.0, sum_dy_xmu = 0.0;
    for (int s = 0; s < splits; ++s) {
      sum_dy += partial[(c * splits + s) * 2];
      sum_dy_xmu += partial[(c * splits + s) * 2 + 1];
    }
    grad_beta[c] = static_cast<float>(sum_dy);
    grad_gamma[c] = static_cast<float>(sum_dy_xmu * static_cast<double>(invstd[c]));
  }
}

// The first pass and its buffer; `finalize(partial, splits)` launches the second.
template <typename T, BnSums kSums, typename Finalize>
void reduce_channels(const Tensor& x, const Tensor* dy, const float* mean, Finalize&& finalize) {
  const Device dev = x.device();
  const BnGeometry g(x);
  const int splits = splits_for(g);
  Tensor partial = Tensor::empty({g.channels * splits * 2}, DType::F64, dev);
  const T* dy_data = dy != nullptr ? dy->data<T>() : nullptr;
  const int n = pack_elements<T>(g.plane, {x.raw(), dy != nullptr ? dy->raw() : x.raw()});
  const dim3 grid(static_cast<unsigned int>(splits),
                  static_cast<unsigned int>(std::clamp<std::int64_t>(g.channels, 1, detail::kMaxBlocks)));
  with_pack(n, [&](auto pack) {
    constexpr int N = decltype(pack)::value;
    bn_partial_sums_kernel<T, N, kSums><<<grid, kBnThreads, 0, stream_of(dev)>>>(
        x.data<T>(), dy_data, g.batch, g.channels, g.plane, splits, lane_shift_for(g.plane / N), mean,
        partial.data<double>());
    PW_CUDA_CHECK_LAUNCH();
  });
  finalize(partial.data<double>(), splits);
}

// y = (x - mean[c]) * scale[c] + beta[c] with scale = gamma * invstd; in eval mode invstd comes from
// the running variance. Blocks walk the planes [n, c] in y (grid-stride) and a plane's packs in x.
enum class BnStatistics { Batch, Running };

template <typename T, int N, BnStatistics kStats>
__global__ void bn_normalize_kernel(const T* __restrict__ x, T* __restrict__ y, std::int64_t planes,
                                    std::int64_t channels, std::int64_t plane, const float* __restrict__ gamma,
                                    const float* __restrict__ beta, const float* __restrict__ mean,
                                    const float* __restrict__ invstd_or_var, float eps) {
  const std::int64_t packs = plane / N;
  for (std::int64_t p = blockIdx.y; p < planes; p += gridDim.y) {
    const std::int64_t c = p % channels;
    const float invstd = kStats == BnStatistics::Batch ? invstd_or_var[c] : rsqrtf(invstd_or_var[c] + eps);
    const float scale = gamma[c] * invstd, m = mean[c], b = beta[c];
    const auto* xp = reinterpret_cast<const Pack<T, N>*>(x + p * plane);
    auto* yp = reinterpret_cast<Pack<T, N>*>(y + p * plane);
    for (std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < packs;
         j += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
      const Pack<T, N> xv = xp[j];
      Pack<T, N> out;
#pragma unroll
      for (int k = 0; k < N; ++k) out.v[k] = store<T>((load(xv.v[k]) - m) * scale + b);
      yp[j] = out;
    }
  }
}

// dx = gamma * invstd * (dy - grad_beta / M - (x - mean) * invstd * grad_gamma / M), M = N * H * W.
template <typename T, int N>
__global__ void bn_backward_input_kernel(const T* __restrict__ x, const T* __restrict__ dy, T* __restrict__ dx,
                                         std::int64_t planes, std::int64_t channels, std::int64_t plane,
                                         float inv_count, const float* __restrict__ gamma,
                                         const float* __restrict__ mean, const float* __restrict__ invstd,
                                         const float* __restrict__ grad_gamma, const float* __restrict__ grad_beta) {
  const std::int64_t packs = plane / N;
  for (std::int64_t p = blockIdx.y; p < planes; p += gridDim.y) {
    const std::int64_t c = p % channels;
    const float s = invstd[c], m = mean[c];
    const float k = gamma[c] * s, mean_dy = grad_beta[c] * inv_count, xhat_coeff = s * grad_gamma[c] * inv_count;
    const auto* xp = reinterpret_cast<const Pack<T, N>*>(x + p * plane);
    const auto* gp = reinterpret_cast<const Pack<T, N>*>(dy + p * plane);
    auto* dp = reinterpret_cast<Pack<T, N>*>(dx + p * plane);
    for (std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < packs;
         j += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
      const Pack<T, N> xv = xp[j], gv = gp[j];
      Pack<T, N> out;
#pragma unroll
      for (int e = 0; e < N; ++e) {
        const float xmu = load(xv.v[e]) - m;
        out.v[e] = store<T>(k * (load(gv.v[e]) - mean_dy - xmu * xhat_coeff));
      }
      dp[j] = out;
    }
  }
}

// Grid of the element-wise kernels: x over a plane's packs, y over the N * C planes (grid-stride).
dim3 plane_grid(const BnGeometry& g, int pack) {
  const std::int64_t packs = g.plane / pack;
  const std::int64_t along = std::clamp<std::int64_t>((packs + detail::kThreads - 1) / detail::kThreads, 1, 1024);
  const std::int64_t planes = std::clamp<std::int64_t>(g.batch * g.channels, 1, detail::kMaxBlocks);
  return dim3(static_cast<unsigned int>(along), static_cast<unsigned int>(planes));
}

Tensor half_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& mean,
                    const Tensor& invstd_or_var, BnStatistics stats, double eps) {
  const Device dev = x.device();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), dev);
  if (x.numel() == 0) return y;
  const BnGeometry g(x);
  detail::visit_cuda_float(x.dtype(), "batch_norm_forward", [&](auto tag) {
    using T = decltype(tag);
    with_pack(pack_elements<T>(g.plane, {x.raw(), y.raw()}), [&](auto pack) {
      constexpr int N = decltype(pack)::value;
      const auto launch = [&](auto kernel) {
        kernel<<<plane_grid(g, N), detail::kThreads, 0, stream_of(dev)>>>(
            x.data<T>(), y.data<T>(), g.batch * g.channels, g.channels, g.plane, gamma.data<float>(),
            beta.data<float>(), mean.data<float>(), invstd_or_var.data<float>(), static_cast<float>(eps));
      };
      if (stats == BnStatistics::Batch) launch(bn_normalize_kernel<T, N, BnStatistics::Batch>);
      else launch(bn_normalize_kernel<T, N, BnStatistics::Running>);
      PW_CUDA_CHECK_LAUNCH();
    });
  });
  return y;
}

BatchNormGrads half_backward(const Tensor& x, const Tensor& grad_y, const Tensor& gamma, const Tensor& save_mean,
                             const Tensor& save_invstd) {
  const Device dev = x.device();
  const BnGeometry g(x);
  for (const Tensor* t : std::initializer_list<const Tensor*>{&gamma, &save_mean, &save_invstd})
    require_channel_tensor(*t, g.channels, "batch_norm_backward: per-channel tensor");
  BatchNormGrads out{Tensor::empty(x.shape(), x.dtype(), dev), Tensor::empty({g.channels}, DType::F32, dev),
                     Tensor::empty({g.channels}, DType::F32, dev)};
  if (x.numel() == 0) {
    out.grad_gamma.zero_();
    out.grad_beta.zero_();
    return out;
  }
  const cudaStream_t stream = stream_of(dev);
  detail::visit_cuda_float(x.dtype(), "batch_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    reduce_channels<T, BnSums::Backward>(x, &grad_y, save_mean.data<float>(), [&](const double* partial, int splits) {
      bn_backward_finalize_kernel<<<detail::blocks_for(g.channels), detail::kThreads, 0, stream>>>(
          partial, splits, g.channels, save_invstd.data<float>(), out.grad_gamma.data<float>(),
          out.grad_beta.data<float>());
      PW_CUDA_CHECK_LAUNCH();
    });
    with_pack(pack_elements<T>(g.plane, {x.raw(), grad_y.raw(), out.grad_x.raw()}), [&](auto pack) {
      constexpr int N = decltype(pack)::value;
      bn_backward_input_kernel<T, N><<<plane_grid(g, N), detail::kThreads, 0, stream>>>(
          x.data<T>(), grad_y.data<T>(), out.grad_x.data<T>(), g.batch * g.channels, g.channels, g.plane,
          static_cast<float>(1.0 / static_cast<double>(g.per_channel())), gamma.data<float>(),
          save_mean.data<float>(), save_invstd.data<float>(), out.grad_gamma.data<float>(),
          out.grad_beta.data<float>());
      PW_CUDA_CHECK_LAUNCH();
    });
  });
  return out;
}

}  // namespace

Tensor batch_norm_forward_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& running_mean,
                                Tensor& running_var, Tensor& save_mean, Tensor& save_invstd,
                                const BatchNormParams& p) {
  detail::require_cuda_float(x, "batch_norm_forward_train: x");
  const Device dev = x.device();
  CudaDeviceGuard guard(dev.index);
  if (x.dtype() != DType::F32) {
    const BnGeometry g(x);
    for (const Tensor* t : std::initializer_list<const Tensor*>{&gamma, &beta, &running_mean, &running_var, &save_mean, &save_invstd})
      require_channel_tensor(*t, g.channels, "batch_norm_forward_train: per-channel tensor");
    PW_CHECK(g.per_channel() > 1,
             "batch_norm_forward_train: needs more than one value per channel, got " << x.describe());
    detail::visit_cuda_float(x.dtype(), "batch_norm_forward_train", [&](auto tag) {
      using T = decltype(tag);
      reduce_channels<T, BnSums::Statistics>(x, nullptr, nullptr, [&](const double* partial, int splits) {
        bn_statistics_finalize_kernel<<<detail::blocks_for(g.channels), detail::kThreads, 0, stream_of(dev)>>>(
            partial, splits, g.channels, static_cast<double>(g.per_channel()), p.momentum, p.eps,
            running_mean.data<float>(), running_var.data<float>(), save_mean.data<float>(),
            save_invstd.data<float>());
        PW_CUDA_CHECK_LAUNCH();
      });
    });
    return half_forward(x, gamma, beta, save_mean, save_invstd, BnStatistics::Batch, p.eps);
  }
  BnDescriptors d(x);
  require_channel_tensor(gamma, d.channels, "batch_norm_forward_train: gamma");
  require_channel_tensor(beta, d.channels, "batch_norm_forward_train: beta");
  require_channel_tensor(running_mean, d.channels, "batch_norm_forward_train: running_mean");
  require_channel_tensor(running_var, d.channels, "batch_norm_forward_train: running_var");
  require_channel_tensor(save_mean, d.channels, "batch_norm_forward_train: save_mean");
  require_channel_tensor(save_invstd, d.channels, "batch_norm_forward_train: save_invstd");
  PW_CHECK(x.numel() / std::max<std::int64_t>(d.channels, 1) > 1,
           "batch_norm_forward_train: needs more than one value per channel, got " << x.describe());
  Tensor y = Tensor::empty(x.shape(), DType::F32, dev);
  const float one = 1.0f, zero = 0.0f;
  PW_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
      cudnn_handle(dev), CUDNN_BATCHNORM_SPATIAL, &one, &zero, d.x.get(), x.raw(), d.x.get(), y.raw(),
      d.channel.get(), gamma.raw(), beta.raw(), p.momentum, running_mean.raw(), running_var.raw(), p.eps,
      save_mean.raw(), save_invstd.raw()));
  return y;
}

Tensor batch_norm_forward_eval(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                               const Tensor& running_var, const BatchNormParams& p) {
  detail::require_cuda_float(x, "batch_norm_forward_eval: x");
  const Device dev = x.device();
  CudaDeviceGuard guard(dev.index);
  if (x.dtype() != DType::F32) {
    const BnGeometry g(x);
    for (const Tensor* t : std::initializer_list<const Tensor*>{&gamma, &beta, &running_mean, &running_var})
      require_channel_tensor(*t, g.channels, "batch_norm_forward_eval: per-channel tensor");
    return half_forward(x, gamma, beta, running_mean, running_var, BnStatistics::Running, p.eps);
  }
  BnDescriptors d(x);
  require_channel_tensor(gamma, d.channels, "batch_norm_forward_eval: gamma");
  require_channel_tensor(beta, d.channels, "batch_norm_forward_eval: beta");
  require_channel_tensor(running_mean, d.channels, "batch_norm_forward_eval: running_mean");
  require_channel_tensor(running_var, d.channels, "batch_norm_forward_eval: running_var");
  Tensor y = Tensor::empty(x.shape(), DType::F32, dev);
  if (x.numel() == 0) return y;
  const float one = 1.0f, zero = 0.0f;
  PW_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(
      cudnn_handle(dev), CUDNN_BATCHNORM_SPATIAL, &one, &zero, d.x.get(), x.raw(), d.x.get(), y.raw(),
      d.channel.get(), gamma.raw(), beta.raw(), running_mean.raw(), running_var.raw(), p.eps));
  return y;
}

BatchNormGrads batch_norm_backward(const Tensor& x, const Tensor& grad_y, const Tensor& gamma,
                                   const Tensor& save_mean, const Tensor& save_invstd, const BatchNormParams& p) {
  detail::require_cuda_float(x, "batch_norm_backward: x");
  detail::require_cuda_float(grad_y, "batch_norm_backward: grad_y");
  PW_CHECK(x.shape() == grad_y.shape() && x.dtype() == grad_y.dtype(),
           "batch_norm_backward: x " << x.describe() << " vs grad_y " << grad_y.describe());
  const Device dev = x.device();
  CudaDeviceGuard guard(dev.index);
  if (x.dtype() != DType::F32) return half_backward(x, grad_y, gamma, save_mean, save_invstd);
  BnDescriptors d(x);
  require_channel_tensor(gamma, d.channels, "batch_norm_backward: gamma");
  require_channel_tensor(save_mean, d.channels, "batch_norm_backward: save_mean");
  require_channel_tensor(save_invstd, d.channels, "batch_norm_backward: save_invstd");
  BatchNormGrads g{Tensor::empty(x.shape(), DType::F32, dev), Tensor::empty({d.channels}, DType::F32, dev),
                   Tensor::empty({d.channels}, DType::F32, dev)};
  if (x.numel() == 0) {   // an empty batch: no gradient anywhere
    g.grad_x.zero_();
    g.grad_gamma.zero_();
    g.grad_beta.zero_();
    return g;
  }
  const float one = 1.0f, zero = 0.0f;
  // Data and parameter gradients are written, not accumulated (beta = 0 for both).
  PW_CUDNN_CHECK(cudnnBatchNormalizationBackward(cudnn_handle(dev), CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &zero,
                                                 d.x.get(), x.raw(), d.x.get(), grad_y.raw(), d.x.get(),
                                                 g.grad_x.raw(), d.channel.get(), gamma.raw(), g.grad_gamma.raw(),
                                                 g.grad_beta.raw(), p.eps, save_mean.raw(), save_invstd.raw()));
  return g;
}

}  // namespace pw::kernels::cuda
