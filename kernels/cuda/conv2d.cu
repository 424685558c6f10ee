// 2-D convolution on CUDA through cuDNN's convolution API (forward, backward-data,
// backward-filter). Algorithms come from cuDNN's _v7 heuristics, filtered by the math mode (FP32 FMA
// math unless TF32 is allowed; deterministic algorithms only when asked) and a workspace limit, and
// the choice and its workspace size are cached per (direction, device, dtype, shape, params, math
// mode).
//
// BF16 and F16 data run as cuDNN's PSEUDO_BFLOAT16 / PSEUDO_HALF configurations: x, w, y (and their
// gradients) in the 16-bit type, a CUDNN_DATA_FLOAT compute type in the convolution descriptor and
// CUDNN_TENSOR_OP_MATH (tensor cores; the TF32 setting concerns F32 data only). The bias stays F32
// and is added by an own kernel (the product is rounded to 16 bits first, then product + bias once
// more); the weight gradient comes out of cuDNN in the 16-bit type (cuDNN wants dw in the data type)
// and is added into the F32 master gradient by an own kernel, and the bias gradient is summed from
// the 16-bit grad_y in F32.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/ops.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <vector>

#include "kernels/allocator.h"
#include "kernels/math_mode.h"

namespace pw::kernels::cuda {
namespace {

enum class ConvDir { Forward, BackwardData, BackwardFilter };

struct ConvKey {
  ConvDir dir;
  int device;
  DType dtype;
  std::int64_t n, c, h, w, k, r, s;
  int pad_h, pad_w, stride_h, stride_w;
  MathMode math;
  friend bool operator==(const ConvKey&, const ConvKey&) = default;
};

struct ConvKeyHash {
  std::size_t operator()(const ConvKey& key) const noexcept {
    std::size_t h = 1469598103934665603ULL;
    const auto mix = [&h](std::int64_t v) { h = (h ^ static_cast<std::size_t>(v)) * 1099511628211ULL; };
    mix(static_cast<std::int64_t>(key.dir));
    mix(key.device);
    mix(static_cast<int>(key.dtype));
    for (std::int64_t v : {key.n, key.c, key.h, key.w, key.k, key.r, key.s}) mix(v);
    for (int v : {key.pad_h, key.pad_w, key.stride_h, key.stride_w}) mix(v);
    mix(static_cast<int>(key.math.tf32));
    mix(static_cast<int>(key.math.determinism));
    return h;
  }
};

// The algorithm that last worked for a key and its workspace size (shared by all threads; only
// the choice is shared, never a handle or workspace). Keeping the size saves a cuDNN query a call.
struct AlgoChoice {
  int algo = 0;
  std::size_t workspace_bytes = 0;
};

class AlgoCache {
 public:
  bool find(const ConvKey& key, AlgoChoice* choice) {
    std::lock_guard lock(mutex_);
    auto it = map_.find(key);
    if (it == map_.end()) return false;
    *choice = it->second;
    return true;
  }
  void put(const ConvKey& key, AlgoChoice choice) {
    std::lock_guard lock(mutex_);
    map_[key] = choice;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<ConvKey, AlgoChoice, ConvKeyHash> map_;
};

AlgoCache& algo_cache() {
  static AlgoCache cache;
  return cache;
}

bool tf32_math(cudnnMathType_t m) { return m == CUDNN_TENSOR_OP_MATH || m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION; }

// cuDNN 9 reports detailed codes (3001-3014 are kinds of "not supported", 2002-2012 kinds of "bad
// parameter"); the category says whether the next algorithm may do better.
bool another_algorithm_may_work(cudnnStatus_t st) {
  const int category = CUDNN_STATUS_CATEGORY(static_cast<int>(st));
  return category == CUDNN_STATUS_NOT_SUPPORTED || category == CUDNN_STATUS_BAD_PARAM;
}

// Heuristic candidates in cuDNN's order of preference that the math mode allows, then `fallback`
// (always last; the caller passes one the mode allows). Tensor-op algorithms are TF32 for F32 data
// (skipped unless TF32 is on) and the point of 16-bit data (always allowed).
template <typename Perf>
std::vector<int> candidates_from(const Perf* perf, int returned, int fallback, const ConvKey& key) {
  const MathMode mode = key.math;
  const bool tensor_ops_allowed = is_half(key.dtype) || mode.tf32 == Tf32::On;
  std::vector<int> out;
  for (int i = 0; i < returned; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    if (!tensor_ops_allowed && tf32_math(perf[i].mathType)) continue;
    if (mode.determinism == Determinism::Deterministic && perf[i].determinism != CUDNN_DETERMINISTIC) continue;
    if (perf[i].memory > kMaxConvWorkspaceBytes) continue;
    out.push_back(static_cast<int>(perf[i].algo));
  }
  bool has_fallback = false;
  for (int a : out) has_fallback = has_fallback || a == fallback;
  if (!has_fallback) out.push_back(fallback);
  return out;
}

// Runs one convolution direction: the cached algorithm when there is one, otherwise each
// candidate in turn until one has a workspace that fits (the device's cap included) and runs.
void run_conv(Device dev, const ConvKey& key, const std::function<std::vector<int>()>& candidates,
              const std::function<cudnnStatus_t(int, std::size_t*)>& workspace_size,
              const std::function<cudnnStatus_t(int, void*, std::size_t)>& run) {
  AlgoChoice cached;
  if (algo_cache().find(key, &cached)) {
    WorkspaceLease ws(dev, cached.workspace_bytes);
    PW_CUDNN_CHECK(run(cached.algo, ws.get(), cached.workspace_bytes));
    return;
  }
  std::ostringstream tried;
  for (int candidate : candidates()) {
    std::size_t bytes = 0;
    if (workspace_size(candidate, &bytes) != CUDNN_STATUS_SUCCESS) continue;
    std::unique_ptr<WorkspaceLease> ws;
    try {
      ws = std::make_unique<WorkspaceLease>(dev, bytes);
    } catch (const OutOfMemory&) {
      tried << " " << candidate << " (workspace of " << bytes << " bytes over the cap)";
      continue;
    }
    const cudnnStatus_t st = run(candidate, ws->get(), bytes);
    if (st == CUDNN_STATUS_SUCCESS) {
      algo_cache().put(key, {candidate, bytes});
      return;
    }
    if (!another_algorithm_may_work(st)) PW_CUDNN_CHECK(st);
    tried << " " << candidate << " (" << cudnn_error_text(st) << ")";
  }
  PW_FAIL("cuDNN found no usable convolution algorithm (direction " << static_cast<int>(key.dir) << ", "
                                                                    << dtype_name(key.dtype) << ", x [" << key.n
                                                                    << ", " << key.c << ", " << key.h << ", "
                                                                    << key.w << "], w [" << key.k << ", " << key.c
                                                                    << ", " << key.r << ", " << key.s
                                                                    << "]); tried:" << tried.str());
}

int cudnn_int(std::int64_t v, const char* what) {
  PW_CHECK(v >= 0 && v <= std::numeric_limits<int>::max(), "conv2d: " << what << " " << v
                                                                       << " does not fit cuDNN's int dimensions");
  return static_cast<int>(v);
}

cudnnDataType_t cudnn_type(DType dtype) {
  switch (dtype) {
    case DType::F32: return CUDNN_DATA_FLOAT;
    case DType::BF16: return CUDNN_DATA_BFLOAT16;
    case DType::F16: return CUDNN_DATA_HALF;
    default: PW_FAIL("conv2d: cuDNN path for " << dtype_name(dtype) << " missing");
  }
}

// Packed NCHW tensor / KCRS filter of `dtype` (F32 through the handles.h setters, 16-bit set here).
void describe_tensor(TensorDescriptor& desc, DType dtype, const Shape& s) {
  if (dtype == DType::F32) return desc.set_nchw(s[0], s[1], s[2], s[3]);
  PW_CUDNN_CHECK(cudnnSetTensor4dDescriptor(desc.get(), CUDNN_TENSOR_NCHW, cudnn_type(dtype), cudnn_int(s[0], "N"),
                                            cudnn_int(s[1], "C"), cudnn_int(s[2], "H"), cudnn_int(s[3], "W")));
}

void describe_filter(FilterDescriptor& desc, DType dtype, const Shape& s) {
  if (dtype == DType::F32) return desc.set_kchw(s[0], s[1], s[2], s[3]);
  PW_CUDNN_CHECK(cudnnSetFilter4dDescriptor(desc.get(), cudnn_type(dtype), CUDNN_TENSOR_NCHW, cudnn_int(s[0], "K"),
                                            cudnn_int(s[1], "C"), cudnn_int(s[2], "KH"), cudnn_int(s[3], "KW")));
}

// F32: float compute, FMA or TF32 math as the mode says (handles.h). 16-bit: float compute
// (PSEUDO_HALF / PSEUDO_BFLOAT16 configurations), tensor-core math.
void describe_convolution(ConvolutionDescriptor& desc, DType dtype, const Conv2dParams& p, Tf32 tf32) {
  if (dtype == DType::F32) return desc.set_2d(p.pad_h, p.pad_w, p.stride_h, p.stride_w, tf32);
  PW_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(desc.get(), p.pad_h, p.pad_w, p.stride_h, p.stride_w, 1, 1,
                                                 CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  PW_CUDNN_CHECK(cudnnSetConvolutionMathType(desc.get(), CUDNN_TENSOR_OP_MATH));
}

// Descriptors for one convolution problem of data type `dtype` (x, w, y and their gradients). They
// are set only for a non-empty problem (cuDNN rejects zero-sized dimensions); callers handle empty
// ones without cuDNN.
struct ConvProblem {
  TensorDescriptor x, y;
  FilterDescriptor w;
  ConvolutionDescriptor conv;
  ConvKey key;
  Shape y_shape;
  bool empty = false;

  ConvProblem(ConvDir dir, int device, DType dtype, const Shape& xs, const Shape& ws, const Conv2dParams& p) {
    PW_CHECK(xs.size() == 4 && ws.size() == 4 && xs[1] == ws[1],
             "conv2d: x " << shape_str(xs) << " and w " << shape_str(ws) << " do not fit");
    PW_CHECK(p.stride_h >= 1 && p.stride_w >= 1 && p.pad_h >= 0 && p.pad_w >= 0 && xs[2] + 2 * p.pad_h >= ws[2] &&
                 xs[3] + 2 * p.pad_w >= ws[3],
             "conv2d: bad geometry for x " << shape_str(xs) << ", w " << shape_str(ws));
    y_shape = {xs[0], ws[0], (xs[2] + 2 * p.pad_h - ws[2]) / p.stride_h + 1,
               (xs[3] + 2 * p.pad_w - ws[3]) / p.stride_w + 1};
    empty = shape_numel(xs) == 0 || shape_numel(ws) == 0 || shape_numel(y_shape) == 0;
    key = ConvKey{dir, device, dtype, xs[0], xs[1], xs[2], xs[3], ws[0], ws[2], ws[3], p.pad_h, p.pad_w, p.stride_h,
                  p.stride_w, math_mode()};
    if (shape_numel(y_shape) > 0) describe_tensor(y, dtype, y_shape);   // for the bias
    if (empty) return;
    describe_tensor(x, dtype, xs);
    describe_filter(w, dtype, ws);
    describe_convolution(conv, dtype, p, key.math.tf32);
    int n = 0, c = 0, h = 0, wd = 0;
    PW_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(conv.get(), x.get(), w.get(), &n, &c, &h, &wd));
    PW_CHECK((Shape{n, c, h, wd}) == y_shape, "conv2d: cuDNN's output shape [" << n << ", " << c << ", " << h << ", "
                                                                               << wd << "] differs from "
                                                                               << shape_str(y_shape));
  }
};

void require_conv_inputs(const Tensor& a, const char* what) {
  detail::require_cuda_float(a, what);
  PW_CHECK(a.ndim() == 4, "" << what << " must be 4-D, got " << a.describe());
}

void require_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  PW_CHECK(a.dtype() == b.dtype(), "" << op << ": " << a.describe() << " and " << b.describe() << " differ in dtype");
}

// ---- kernels for 16-bit data --------------------------------------------------------------------

using detail::load;
using detail::store;

// y[n, c, h, w] = T(y + bias[c]) over a packed NCHW tensor; `plane` = H * W.
template <typename T>
__global__ void add_channel_bias_kernel(T* __restrict__ y, const float* __restrict__ bias, std::int64_t total,
                                        std::int64_t channels, std::int64_t plane) {
  PW_CUDA_KERNEL_LOOP(i, total) { y[i] = store<T>(load(y[i]) + bias[(i / plane) % channels]); }
}

// grad_w += dw (dw in the 16-bit data type, grad_w the F32 master gradient).
template <typename T>
__global__ void accumulate_widened_kernel(float* __restrict__ grad_w, const T* __restrict__ dw, std::int64_t n) {
  PW_CUDA_KERNEL_LOOP(i, n) { grad_w[i] += load(dw[i]); }
}

// grad_bias[c] += sum over n, h, w of grad_y[n, c, h, w], summed in F32: one block per channel
// (grid-stride over channels), each thread a strided slice of the N * H * W values, then a
// fixed-order block sum (deterministic).
constexpr int kBiasThreads = 512;
template <typename T>
__global__ void channel_sum_accumulate_kernel(const T* __restrict__ grad_y, float* __restrict__ grad_bias,
                                              std::int64_t batch, std::int64_t channels, std::int64_t plane) {
  __shared__ float scratch[32];
  const std::int64_t per_channel = batch * plane;
  for (std::int64_t c = blockIdx.x; c < channels; c += gridDim.x) {
    float acc = 0.0f;
    for (std::int64_t t = threadIdx.x; t < per_channel; t += blockDim.x) {
      const std::int64_t n = t / plane, j = t - n * plane;
      acc += load(grad_y[(n * channels + c) * plane + j]);
    }
    acc = detail::block_sum(acc, scratch);
    if (threadIdx.x == 0) grad_bias[c] += acc;
  }
}

}  // namespace

Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p) {
  require_conv_inputs(x, "conv2d_forward: x");
  require_conv_inputs(w, "conv2d_forward: w");
  require_same_dtype(x, w, "conv2d_forward");
  const Device dev = x.device();
  const DType data = x.dtype();
  CudaDeviceGuard guard(dev.index);
  ConvProblem prob(ConvDir::Forward, dev.index, data, x.shape(), w.shape(), p);
  Tensor y = Tensor::empty(prob.y_shape, data, dev);
  if (y.numel() == 0) return y;
  if (prob.empty) {   // Cin == 0: only the bias remains
    y.zero_();
  } else {
    cudnnHandle_t handle = cudnn_handle(dev);
    const float one = 1.0f, zero = 0.0f;
    run_conv(
        dev, prob.key,
        [&] {
          cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
          int returned = 0;
          PW_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle, prob.x.get(), prob.w.get(), prob.conv.get(),
                                                                prob.y.get(), CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                                &returned, perf));
          return candidates_from(perf, returned, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, prob.key);
        },
        [&](int algo, std::size_t* bytes) {
          return cudnnGetConvolutionForwardWorkspaceSize(handle, prob.x.get(), prob.w.get(), prob.conv.get(),
                                                         prob.y.get(), static_cast<cudnnConvolutionFwdAlgo_t>(algo),
                                                         bytes);
        },
        [&](int algo, void* ws, std::size_t bytes) {
          return cudnnConvolutionForward(handle, &one, prob.x.get(), x.raw(), prob.w.get(), w.raw(), prob.conv.get(),
                                         static_cast<cudnnConvolutionFwdAlgo_t>(algo), ws, bytes, &zero,
                                         prob.y.get(), y.raw());
        });
  }
  if (bias.defined()) {
    detail::require_f32(bias, "conv2d_forward: bias");
    PW_CHECK(bias.numel() == prob.y_shape[1], "conv2d_forward: bias " << bias.describe() << " for "
                                                                      << prob.y_shape[1] << " output channels");
    if (data == DType::F32) {
      TensorDescriptor bias_desc;
      bias_desc.set_nchw(1, prob.y_shape[1], 1, 1);
      const float one = 1.0f;
      PW_CUDNN_CHECK(
          cudnnAddTensor(cudnn_handle(dev), &one, bias_desc.get(), bias.raw(), &one, prob.y.get(), y.raw()));
    } else {
      // An F32 bias beside a 16-bit y: cudnnAddTensor wants one data type for both, so an own kernel.
      const std::int64_t total = y.numel(), plane = prob.y_shape[2] * prob.y_shape[3];
      detail::visit_cuda_float(data, "conv2d_forward", [&](auto tag) {
        using T = decltype(tag);
        add_channel_bias_kernel<T><<<detail::blocks_for(total), detail::kThreads, 0, stream_of(dev)>>>(
            y.data<T>(), bias.data<float>(), total, prob.y_shape[1], plane);
        PW_CUDA_CHECK_LAUNCH();
      });
    }
  }
  return y;
}

Tensor conv2d_backward_data(const Tensor& grad_y, const Tensor& w, const Shape& x_shape, const Conv2dParams& p) {
  require_conv_inputs(grad_y, "conv2d_backward_data: grad_y");
  require_conv_inputs(w, "conv2d_backward_data: w");
  require_same_dtype(grad_y, w, "conv2d_backward_data");
  const Device dev = grad_y.device();
  const DType data = grad_y.dtype();
  CudaDeviceGuard guard(dev.index);
  ConvProblem prob(ConvDir::BackwardData, dev.index, data, x_shape, w.shape(), p);
  PW_CHECK(prob.y_shape == grad_y.shape(), "conv2d_backward_data: grad_y " << grad_y.describe() << ", expected "
                                                                            << shape_str(prob.y_shape));
  Tensor grad_x = Tensor::empty(x_shape, data, dev);
  if (grad_x.numel() == 0) return grad_x;
  if (prob.empty) {
    grad_x.zero_();
    return grad_x;
  }
  cudnnHandle_t handle = cudnn_handle(dev);
  const float one = 1.0f, zero = 0.0f;
  run_conv(
      dev, prob.key,
      [&] {
        cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        int returned = 0;
        PW_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, prob.w.get(), prob.y.get(),
                                                                   prob.conv.get(), prob.x.get(),
                                                                   CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned,
                                                                   perf));
        return candidates_from(perf, returned, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, prob.key);
      },
      [&](int algo, std::size_t* bytes) {
        return cudnnGetConvolutionBackwardDataWorkspaceSize(handle, prob.w.get(), prob.y.get(), prob.conv.get(),
                                                            prob.x.get(),
                                                            static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), bytes);
      },
      [&](int algo, void* ws, std::size_t bytes) {
        return cudnnConvolutionBackwardData(handle, &one, prob.w.get(), w.raw(), prob.y.get(), grad_y.raw(),
                                            prob.conv.get(), static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), ws,
                                            bytes, &zero, prob.x.get(), grad_x.raw());
      });
  return grad_x;
}

// grad_w and grad_bias are F32 for every data type and accumulate (+=). F32 data: cuDNN adds into
// grad_w itself (beta = 1). 16-bit data: cuDNN writes dw in the data type into a scratch tensor
// (beta = 0), which an own kernel then adds into grad_w.
void conv2d_backward_filter(const Tensor& x, const Tensor& grad_y, Tensor& grad_w, Tensor& grad_bias,
                            const Conv2dParams& p) {
  require_conv_inputs(x, "conv2d_backward_filter: x");
  require_conv_inputs(grad_y, "conv2d_backward_filter: grad_y");
  require_same_dtype(x, grad_y, "conv2d_backward_filter");
  detail::require_f32(grad_w, "conv2d_backward_filter: grad_w");
  PW_CHECK(grad_w.ndim() == 4, "conv2d_backward_filter: grad_w must be 4-D, got " << grad_w.describe());
  const Device dev = x.device();
  const DType data = x.dtype();
  CudaDeviceGuard guard(dev.index);
  ConvProblem prob(ConvDir::BackwardFilter, dev.index, data, x.shape(), grad_w.shape(), p);
  PW_CHECK(prob.y_shape == grad_y.shape(), "conv2d_backward_filter: grad_y " << grad_y.describe() << ", expected "
                                                                              << shape_str(prob.y_shape));
  const cudaStream_t stream = stream_of(dev);
  // Nothing to add when the batch (or any factor) is empty: accumulating zero is a no-op.
  if (!prob.empty) {
    cudnnHandle_t handle = cudnn_handle(dev);
    const bool widen = data != DType::F32;
    const Tensor dw = widen ? Tensor::empty(grad_w.shape(), data, dev) : grad_w;
    const float one = 1.0f, zero = 0.0f;
    const float* beta = widen ? &zero : &one;   // F32: beta = 1 accumulates into grad_w
    run_conv(
        dev, prob.key,
        [&] {
          cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
          int returned = 0;
          PW_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, prob.x.get(), prob.y.get(),
                                                                       prob.conv.get(), prob.w.get(),
                                                                       CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
                                                                       &returned, perf));
          // ALGO_0 sums with atomics (not deterministic); ALGO_1 always runs and is deterministic.
          const auto fallback = prob.key.math.determinism == Determinism::Deterministic
                                    ? CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1
                                    : CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0;
          return candidates_from(perf, returned, fallback, prob.key);
        },
        [&](int algo, std::size_t* bytes) {
          return cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, prob.x.get(), prob.y.get(), prob.conv.get(),
                                                                prob.w.get(),
                                                                static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo),
                                                                bytes);
        },
        [&](int algo, void* ws, std::size_t bytes) {
          return cudnnConvolutionBackwardFilter(handle, &one, prob.x.get(), x.raw(), prob.y.get(), grad_y.raw(),
                                                prob.conv.get(), static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo),
                                                ws, bytes, beta, prob.w.get(), dw.raw());
        });
    if (widen) {
      const std::int64_t n = grad_w.numel();
      detail::visit_cuda_float(data, "conv2d_backward_filter", [&](auto tag) {
        using T = decltype(tag);
        accumulate_widened_kernel<T><<<detail::blocks_for(n), detail::kThreads, 0, stream>>>(grad_w.data<float>(),
                                                                                            dw.data<T>(), n);
        PW_CUDA_CHECK_LAUNCH();
      });
    }
  }
  if (grad_bias.defined() && grad_y.numel() > 0) {
    detail::require_f32(grad_bias, "conv2d_backward_filter: grad_bias");
    PW_CHECK(grad_bias.numel() == prob.y_shape[1], "conv2d_backward_filter: grad_bias " << grad_bias.describe());
    if (data == DType::F32) {
      TensorDescriptor bias_desc;
      bias_desc.set_nchw(1, prob.y_shape[1], 1, 1);
      const float one = 1.0f;
      PW_CUDNN_CHECK(cudnnConvolutionBackwardBias(cudnn_handle(dev), &one, prob.y.get(), grad_y.raw(), &one,
                                                  bias_desc.get(), grad_bias.raw()));
    } else {
      const std::int64_t channels = prob.y_shape[1], plane = prob.y_shape[2] * prob.y_shape[3];
      const auto blocks = static_cast<unsigned int>(std::min<std::int64_t>(channels, detail::kMaxBlocks));
      detail::visit_cuda_float(data, "conv2d_backward_filter", [&](auto tag) {
        using T = decltype(tag);
        channel_sum_accumulate_kernel<T><<<blocks, kBiasThreads, 0, stream>>>(grad_y.data<T>(), grad_bias.data<float>(),
                                                                              prob.y_shape[0], channels, plane);
        PW_CUDA_CHECK_LAUNCH();
      });
    }
  }
}

}  // namespace pw::kernels::cuda
