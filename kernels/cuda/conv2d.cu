// 2-D convolution on CUDA through cuDNN's convolution API (forward, backward-data,
// backward-filter). Algorithms come from cuDNN's _v7 heuristics, filtered by the math mode (FP32 FMA
// math unless TF32 is allowed; deterministic algorithms only when asked) and a workspace limit, and
// the choice is cached per (direction, device, shape, params, math mode).
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

#include <functional>
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
    for (std::int64_t v : {key.n, key.c, key.h, key.w, key.k, key.r, key.s}) mix(v);
    for (int v : {key.pad_h, key.pad_w, key.stride_h, key.stride_w}) mix(v);
    mix(static_cast<int>(key.math.tf32));
    mix(static_cast<int>(key.math.determinism));
    return h;
  }
};

// The algorithm that last worked for a key (shared by all threads; only the choice is shared,
// never a handle or workspace).
class AlgoCache {
 public:
  bool find(const ConvKey& key, int* algo) {
    std::lock_guard lock(mutex_);
    auto it = map_.find(key);
    if (it == map_.end()) return false;
    *algo = it->second;
    return true;
  }
  void put(const ConvKey& key, int algo) {
    std::lock_guard lock(mutex_);
    map_[key] = algo;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<ConvKey, int, ConvKeyHash> map_;
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
// (always last; the caller passes one the mode allows).
template <typename Perf>
std::vector<int> candidates_from(const Perf* perf, int returned, int fallback, MathMode mode) {
  std::vector<int> out;
  for (int i = 0; i < returned; ++i) {
    if (perf[i].status != CUDNN_STATUS_SUCCESS) continue;
    if (mode.tf32 == Tf32::Off && tf32_math(perf[i].mathType)) continue;
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
  int algo = 0;
  if (algo_cache().find(key, &algo)) {
    std::size_t bytes = 0;
    PW_CUDNN_CHECK(workspace_size(algo, &bytes));
    WorkspaceLease ws(dev, bytes);
    PW_CUDNN_CHECK(run(algo, ws.get(), bytes));
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
      algo_cache().put(key, candidate);
      return;
    }
    if (!another_algorithm_may_work(st)) PW_CUDNN_CHECK(st);
    tried << " " << candidate << " (" << cudnn_error_text(st) << ")";
  }
  PW_FAIL("cuDNN found no usable convolution algorithm (direction " << static_cast<int>(key.dir) << ", x [" << key.n
                                                                    << ", " << key.c << ", " << key.h << ", "
                                                                    << key.w << "], w [" << key.k << ", " << key.c
                                                                    << ", " << key.r << ", " << key.s
                                                                    << "]); tried:" << tried.str());
}

// Descriptors for one convolution problem. They are set only for a non-empty problem (cuDNN
// rejects zero-sized dimensions); callers handle empty ones without cuDNN.
struct ConvProblem {
  TensorDescriptor x, y;
  FilterDescriptor w;
  ConvolutionDescriptor conv;
  ConvKey key;
  Shape y_shape;
  bool empty = false;

  ConvProblem(ConvDir dir, int device, const Shape& xs, const Shape& ws, const Conv2dParams& p) {
    PW_CHECK(xs.size() == 4 && ws.size() == 4 && xs[1] == ws[1],
             "conv2d: x " << shape_str(xs) << " and w " << shape_str(ws) << " do not fit");
    PW_CHECK(p.stride_h >= 1 && p.stride_w >= 1 && p.pad_h >= 0 && p.pad_w >= 0 && xs[2] + 2 * p.pad_h >= ws[2] &&
                 xs[3] + 2 * p.pad_w >= ws[3],
             "conv2d: bad geometry for x " << shape_str(xs) << ", w " << shape_str(ws));
    y_shape = {xs[0], ws[0], (xs[2] + 2 * p.pad_h - ws[2]) / p.stride_h + 1,
               (xs[3] + 2 * p.pad_w - ws[3]) / p.stride_w + 1};
    empty = shape_numel(xs) == 0 || shape_numel(ws) == 0 || shape_numel(y_shape) == 0;
    key = ConvKey{dir, device, xs[0], xs[1], xs[2], xs[3], ws[0], ws[2], ws[3], p.pad_h, p.pad_w, p.stride_h,
                  p.stride_w, math_mode()};
    if (shape_numel(y_shape) > 0) y.set_nchw(y_shape[0], y_shape[1], y_shape[2], y_shape[3]);   // for the bias
    if (empty) return;
    x.set_nchw(xs[0], xs[1], xs[2], xs[3]);
    w.set_kchw(ws[0], ws[1], ws[2], ws[3]);
    conv.set_2d(p.pad_h, p.pad_w, p.stride_h, p.stride_w, key.math.tf32);
    int n = 0, c = 0, h = 0, wd = 0;
    PW_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(conv.get(), x.get(), w.get(), &n, &c, &h, &wd));
    PW_CHECK((Shape{n, c, h, wd}) == y_shape, "conv2d: cuDNN's output shape [" << n << ", " << c << ", " << h << ", "
                                                                               << wd << "] differs from "
                                                                               << shape_str(y_shape));
  }
};

void require_conv_inputs(const Tensor& a, const char* what) {
  detail::require_f32(a, what);
  PW_CHECK(a.ndim() == 4, "" << what << " must be 4-D, got " << a.describe());
}

}  // namespace

Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dParams& p) {
  require_conv_inputs(x, "conv2d_forward: x");
  require_conv_inputs(w, "conv2d_forward: w");
  const Device dev = x.device();
  CudaDeviceGuard guard(dev.index);
  ConvProblem prob(ConvDir::Forward, dev.index, x.shape(), w.shape(), p);
  Tensor y = Tensor::empty(prob.y_shape, DType::F32, dev);
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
          return candidates_from(perf, returned, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, prob.key.math);
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
    TensorDescriptor bias_desc;
    bias_desc.set_nchw(1, prob.y_shape[1], 1, 1);
    const float one = 1.0f;
    PW_CUDNN_CHECK(cudnnAddTensor(cudnn_handle(dev), &one, bias_desc.get(), bias.raw(), &one, prob.y.get(), y.raw()));
  }
  return y;
}

Tensor conv2d_backward_data(const Tensor& grad_y, const Tensor& w, const Shape& x_shape, const Conv2dParams& p) {
  require_conv_inputs(grad_y, "conv2d_backward_data: grad_y");
  require_conv_inputs(w, "conv2d_backward_data: w");
  const Device dev = grad_y.device();
  CudaDeviceGuard guard(dev.index);
  ConvProblem prob(ConvDir::BackwardData, dev.index, x_shape, w.shape(), p);
  PW_CHECK(prob.y_shape == grad_y.shape(), "conv2d_backward_data: grad_y " << grad_y.describe() << ", expected "
                                                                            << shape_str(prob.y_shape));
  Tensor grad_x = Tensor::empty(x_shape, DType::F32, dev);
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
        return candidates_from(perf, returned, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, prob.key.math);
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

void conv2d_backward_filter(const Tensor& x, const Tensor& grad_y, Tensor& grad_w, Tensor& grad_bias,
                            const Conv2dParams& p) {
  require_conv_inputs(x, "conv2d_backward_filter: x");
  require_conv_inputs(grad_y, "conv2d_backward_filter: grad_y");
  require_conv_inputs(grad_w, "conv2d_backward_filter: grad_w");
  const Device dev = x.device();
  CudaDeviceGuard guard(dev.index);
  ConvProblem prob(ConvDir::BackwardFilter, dev.index, x.shape(), grad_w.shape(), p);
  PW_CHECK(prob.y_shape == grad_y.shape(), "conv2d_backward_filter: grad_y " << grad_y.describe() << ", expected "
                                                                              << shape_str(prob.y_shape));
  const float one = 1.0f;
  // Nothing to add when the batch (or any factor) is empty: accumulating zero is a no-op.
  if (!prob.empty) {
    cudnnHandle_t handle = cudnn_handle(dev);
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
          return candidates_from(perf, returned, fallback, prob.key.math);
        },
        [&](int algo, std::size_t* bytes) {
          return cudnnGetConvolutionBackwardFilterWorkspaceSize(handle, prob.x.get(), prob.y.get(), prob.conv.get(),
                                                                prob.w.get(),
                                                                static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo),
                                                                bytes);
        },
        [&](int algo, void* ws, std::size_t bytes) {
          // beta = 1: accumulate into grad_w.
          return cudnnConvolutionBackwardFilter(handle, &one, prob.x.get(), x.raw(), prob.y.get(), grad_y.raw(),
                                                prob.conv.get(), static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo),
                                                ws, bytes, &one, prob.w.get(), grad_w.raw());
        });
  }
  if (grad_bias.defined() && grad_y.numel() > 0) {
    detail::require_f32(grad_bias, "conv2d_backward_filter: grad_bias");
    PW_CHECK(grad_bias.numel() == prob.y_shape[1], "conv2d_backward_filter: grad_bias " << grad_bias.describe());
    TensorDescriptor bias_desc;
    bias_desc.set_nchw(1, prob.y_shape[1], 1, 1);
    PW_CUDNN_CHECK(cudnnConvolutionBackwardBias(cudnn_handle(dev), &one, prob.y.get(), grad_y.raw(), &one,
                                                bias_desc.get(), grad_bias.raw()));
  }
}

}  // namespace pw::kernels::cuda
