// Softmax cross-entropy on CUDA: one block per row (max-subtracted softmax, per-row loss and
// arg-max), then one block adds the rows in a fixed order, so the loss is deterministic.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

#include <cmath>

namespace pw::kernels::cuda {
namespace {

using detail::blocks_for;
using detail::kThreads;

constexpr int kRowThreads = 256;

// ---- kernels ------------------------------------------------------------------------------------

// Per row: probs, row_loss[row] = logsumexp(x) - x[label], row_flag[row] = 1 if argmax == label,
// 0 if not, -1 if the label is out of [0, C). The arg-max is the first index of the maximum.
__global__ void softmax_xent_rows_kernel(const float* __restrict__ logits, const std::int64_t* __restrict__ labels,
                                         float* __restrict__ probs, double* __restrict__ row_loss,
                                         double* __restrict__ row_flag, std::int64_t rows, std::int64_t cols) {
  __shared__ float s_val[32];
  __shared__ std::int64_t s_idx[32];
  __shared__ float s_sum[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* x = logits + row * cols;
    float* pr = probs + row * cols;
    // Arg-max: each thread scans increasing indexes (strict > keeps its first), then pairs
    // merge preferring the larger value and, on ties, the smaller index.
    float best = -INFINITY;   // with best_at == cols: "no element yet", loses every tie
    std::int64_t best_at = cols;
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float v = x[c];
      if (v > best || best_at == cols) {
        best = v;
        best_at = c;
      }
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, best, offset);
      const std::int64_t oi = __shfl_xor_sync(0xffffffffu, best_at, offset);
      if (ov > best || (ov == best && oi < best_at)) {
        best = ov;
        best_at = oi;
      }
    }
    __syncthreads();   // shared arrays are reused across rows
    if (lane == 0) {
      s_val[warp] = best;
      s_idx[warp] = best_at;
    }
    __syncthreads();
    best = lane < warps ? s_val[lane] : -INFINITY;
    best_at = lane < warps ? s_idx[lane] : cols;
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, best, offset);
      const std::int64_t oi = __shfl_xor_sync(0xffffffffu, best_at, offset);
      if (ov > best || (ov == best && oi < best_at)) {
        best = ov;
        best_at = oi;
      }
    }
    const float row_max = best;
    float local = 0.0f;
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) local += expf(x[c] - row_max);
    const float total = detail::block_sum(local, s_sum);
    const float inv = 1.0f / total;
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) pr[c] = expf(x[c] - row_max) * inv;
    if (threadIdx.x == 0) {
      const std::int64_t label = labels[row];
      if (label < 0 || label >= cols) {
        row_loss[row] = 0.0;
        row_flag[row] = -1.0;
      } else {
        row_loss[row] = static_cast<double>(logf(total)) - (static_cast<double>(x[label]) - row_max);
        row_flag[row] = best_at == label ? 1.0 : 0.0;
      }
    }
  }
}

// out[0] = sum of row losses, out[1] = rows with flag 1, out[2] = rows with a bad label.
__global__ void softmax_xent_total_kernel(const double* __restrict__ row_loss, const double* __restrict__ row_flag,
                                          std::int64_t rows, double* __restrict__ out) {
  __shared__ double scratch[32];
  double loss = 0.0, correct = 0.0, bad = 0.0;
  for (std::int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    loss += row_loss[r];
    correct += row_flag[r] > 0.5 ? 1.0 : 0.0;
    bad += row_flag[r] < -0.5 ? 1.0 : 0.0;
  }
  loss = detail::block_sum(loss, scratch);
  correct = detail::block_sum(correct, scratch);
  bad = detail::block_sum(bad, scratch);
  if (threadIdx.x == 0) {
    out[0] = loss;
    out[1] = correct;
    out[2] = bad;
  }
}

__global__ void softmax_xent_backward_kernel(const float* __restrict__ probs, const std::int64_t* __restrict__ labels,
                                             float* __restrict__ grad, std::int64_t rows, std::int64_t cols,
                                             float scale) {
  const std::int64_t total = rows * cols;
  PW_CUDA_KERNEL_LOOP(i, total) {
    const std::int64_t row = i / cols, col = i % cols;
    const float onehot = labels[row] == col ? 1.0f : 0.0f;
    grad[i] = (probs[i] - onehot) * scale;
  }
}

void check_labels(const Tensor& logits, const Tensor& labels, const char* op) {
  detail::require_f32(logits, op);
  PW_CHECK(logits.ndim() == 2, "" << op << ": logits/probs must be [N, C], got " << logits.describe());
  PW_CHECK(labels.dtype() == DType::I64 && labels.numel() == logits.dim(0) && labels.device() == logits.device(),
           "" << op << ": labels " << labels.describe() << " do not fit " << logits.describe());
}

}  // namespace

// ---- launchers ----------------------------------------------------------------------------------

CrossEntropyResult softmax_cross_entropy_forward(const Tensor& logits, const Tensor& labels) {
  check_labels(logits, labels, "softmax_cross_entropy_forward");
  const Device dev = logits.device();
  CudaDeviceGuard guard(dev.index);
  const std::int64_t rows = logits.dim(0), cols = logits.dim(1);
  CrossEntropyResult r{0.0, Tensor::empty(logits.shape(), DType::F32, dev), 0};
  if (rows == 0) return r;
  PW_CHECK(cols > 0, "softmax_cross_entropy_forward: no classes in " << logits.describe());
  Tensor buf = Tensor::empty({2 * rows + 3}, DType::F64, dev);
  double* row_loss = buf.data<double>();
  double* row_flag = row_loss + rows;
  double* out = row_flag + rows;
  const cudaStream_t stream = stream_of(dev);
  softmax_xent_rows_kernel<<<blocks_for(rows, 1), kRowThreads, 0, stream>>>(
      logits.data<float>(), labels.data<std::int64_t>(), r.probs.data<float>(), row_loss, row_flag, rows, cols);
  PW_CUDA_CHECK_LAUNCH();
  softmax_xent_total_kernel<<<1, 1024, 0, stream>>>(row_loss, row_flag, rows, out);
  PW_CUDA_CHECK_LAUNCH();
  double host[3] = {0.0, 0.0, 0.0};
  PW_CUDA_CHECK(cudaMemcpyAsync(host, out, sizeof(host), cudaMemcpyDeviceToHost, stream));
  PW_CUDA_CHECK(cudaStreamSynchronize(stream));
  PW_CHECK(host[2] == 0.0, "softmax_cross_entropy_forward: " << static_cast<std::int64_t>(host[2])
                                                             << " labels out of the class range [0, " << cols << ")");
  r.loss = host[0] / static_cast<double>(rows);
  r.correct = static_cast<std::int64_t>(host[1]);
  return r;
}

Tensor softmax_cross_entropy_backward(const Tensor& probs, const Tensor& labels, double scale) {
  check_labels(probs, labels, "softmax_cross_entropy_backward");
  const Device dev = probs.device();
  CudaDeviceGuard guard(dev.index);
  Tensor grad = Tensor::empty(probs.shape(), DType::F32, dev);
  const std::int64_t rows = probs.dim(0), cols = probs.dim(1);
  if (rows * cols == 0) return grad;
  softmax_xent_backward_kernel<<<blocks_for(rows * cols), kThreads, 0, stream_of(dev)>>>(
      probs.data<float>(), labels.data<std::int64_t>(), grad.data<float>(), rows, cols, static_cast<float>(scale));
  PW_CUDA_CHECK_LAUNCH();
  return grad;
}

}  // namespace pw::kernels::cuda
