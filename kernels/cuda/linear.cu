// Fully connected layers and matmul on CUDA via cuBLAS SGEMM (CUBLAS_DEFAULT_MATH: FP32, no TF32).
//
// cuBLAS is column-major. A row-major [R, C] buffer read column-major is its transpose [C, R]
// with leading dimension C, so a row-major product Y = A * B is computed as the column-major
// product Y^T = B^T * A^T over the same buffers, with the operands swapped.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/ops.h"

#include <limits>

namespace pw::kernels::cuda {
namespace {

using detail::blocks_for;
using detail::kThreads;

// ---- kernels ------------------------------------------------------------------------------------

// y[n, m] = bias[m] for every row: the GEMM then adds x * w^T with beta = 1.
__global__ void broadcast_rows_kernel(const float* __restrict__ bias, float* __restrict__ y, std::int64_t rows,
                                      std::int64_t cols) {
  const std::int64_t total = rows * cols;
  PW_CUDA_KERNEL_LOOP(i, total) { y[i] = bias[i % cols]; }
}

// grad_bias[m] += sum_n grad_y[n, m]. Block = 32 columns x 8 row lanes; each lane walks the rows
// with stride 8, then the 8 lanes are added in shared memory in a fixed order (deterministic).
constexpr int kColTile = 32;
constexpr int kRowLanes = 8;
__global__ void column_sum_accumulate_kernel(const float* __restrict__ grad_y, float* __restrict__ grad_bias,
                                             std::int64_t rows, std::int64_t cols) {
  __shared__ float partial[kRowLanes][kColTile];
  const std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * kColTile + threadIdx.x;
  float acc = 0.0f;
  if (col < cols) {
    for (std::int64_t r = threadIdx.y; r < rows; r += kRowLanes) acc += grad_y[r * cols + col];
  }
  partial[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float total = 0.0f;
    for (int k = 0; k < kRowLanes; ++k) total += partial[k][threadIdx.x];
    grad_bias[col] += total;
  }
}

// ---- helpers ------------------------------------------------------------------------------------

int blas_int(std::int64_t v, const char* what) {
  PW_CHECK(v >= 0 && v <= std::numeric_limits<int>::max(), "" << what << " = " << v << " exceeds cuBLAS's int range");
  return static_cast<int>(v);
}

// Column-major C[m, n] = alpha * op(A)[m, k] * op(B)[k, n] + beta * C.
void sgemm(Device dev, cublasOperation_t op_a, cublasOperation_t op_b, std::int64_t m, std::int64_t n,
           std::int64_t k, const float* a, std::int64_t lda, const float* b, std::int64_t ldb, float beta, float* c,
           std::int64_t ldc) {
  const float alpha = 1.0f;
  PW_CUBLAS_CHECK(cublasSgemm(cublas_handle(dev), op_a, op_b, blas_int(m, "m"), blas_int(n, "n"), blas_int(k, "k"),
                              &alpha, a, blas_int(std::max<std::int64_t>(lda, 1), "lda"), b,
                              blas_int(std::max<std::int64_t>(ldb, 1), "ldb"), &beta, c,
                              blas_int(std::max<std::int64_t>(ldc, 1), "ldc")));
}

void check_matrix(const Tensor& t, const char* what) {
  detail::require_f32(t, what);
  PW_CHECK(t.ndim() == 2, "" << what << " must be 2-D, got " << t.describe());
}

}  // namespace

// ---- launchers ----------------------------------------------------------------------------------

// y[N, M] = x[N, K] * w[M, K]^T + b  ==  column-major y^T[M, N] = w^T(op T of w's [K, M] view) * x^T.
Tensor linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias) {
  check_matrix(x, "linear_forward: x");
  check_matrix(w, "linear_forward: w");
  const std::int64_t n = x.dim(0), k = x.dim(1), m = w.dim(0);
  PW_CHECK(w.dim(1) == k, "linear_forward: x " << x.describe() << " and w " << w.describe() << " disagree on K");
  const Device dev = x.device();
  CudaDeviceGuard guard(dev.index);
  Tensor y = Tensor::empty({n, m}, DType::F32, dev);
  if (n == 0 || m == 0) return y;
  const cudaStream_t stream = stream_of(dev);
  float beta = 0.0f;
  if (bias.defined()) {
    detail::require_f32(bias, "linear_forward: bias");
    PW_CHECK(bias.numel() == m, "linear_forward: bias " << bias.describe() << " for " << m << " outputs");
    broadcast_rows_kernel<<<blocks_for(n * m), kThreads, 0, stream>>>(bias.data<float>(), y.data<float>(), n, m);
    PW_CUDA_CHECK_LAUNCH();
    beta = 1.0f;
  } else if (k == 0) {
    y.zero_();
    return y;
  }
  if (k == 0) return y;
  sgemm(dev, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, w.data<float>(), k, x.data<float>(), k, beta, y.data<float>(), m);
  return y;
}

// grad_x[N, K] = grad_y[N, M] * w[M, K]  ==  column-major grad_x^T[K, N] = w^T[K, M] * grad_y^T[M, N].
Tensor linear_backward_data(const Tensor& grad_y, const Tensor& w) {
  check_matrix(grad_y, "linear_backward_data: grad_y");
  check_matrix(w, "linear_backward_data: w");
  const std::int64_t n = grad_y.dim(0), m = grad_y.dim(1), k = w.dim(1);
  PW_CHECK(w.dim(0) == m, "linear_backward_data: grad_y " << grad_y.describe() << " and w " << w.describe()
                                                          << " disagree on M");
  const Device dev = grad_y.device();
  CudaDeviceGuard guard(dev.index);
  Tensor grad_x = Tensor::empty({n, k}, DType::F32, dev);
  if (n == 0 || k == 0) return grad_x;
  if (m == 0) {
    grad_x.zero_();
    return grad_x;
  }
  sgemm(dev, CUBLAS_OP_N, CUBLAS_OP_N, k, n, m, w.data<float>(), k, grad_y.data<float>(), m, 0.0f,
        grad_x.data<float>(), k);
  return grad_x;
}

// grad_w[M, K] += grad_y^T[M, N] * x[N, K]  ==  column-major grad_w^T[K, M] += x^T[K, N] * grad_y[N, M]
// (grad_y's buffer read column-major is grad_y^T[M, N], so it enters with op T).
void linear_backward_weight(const Tensor& x, const Tensor& grad_y, Tensor& grad_w, Tensor& grad_bias) {
  check_matrix(x, "linear_backward_weight: x");
  check_matrix(grad_y, "linear_backward_weight: grad_y");
  detail::require_f32(grad_w, "linear_backward_weight: grad_w");
  const std::int64_t n = x.dim(0), k = x.dim(1), m = grad_y.dim(1);
  PW_CHECK(grad_y.dim(0) == n && grad_w.numel() == m * k,
           "linear_backward_weight: x " << x.describe() << ", grad_y " << grad_y.describe() << ", grad_w "
                                        << grad_w.describe());
  const Device dev = x.device();
  CudaDeviceGuard guard(dev.index);
  if (n > 0 && m > 0 && k > 0) {
    sgemm(dev, CUBLAS_OP_N, CUBLAS_OP_T, k, m, n, x.data<float>(), k, grad_y.data<float>(), m, 1.0f,
          grad_w.data<float>(), k);
  }
  if (grad_bias.defined()) {
    detail::require_f32(grad_bias, "linear_backward_weight: grad_bias");
    PW_CHECK(grad_bias.numel() == m, "linear_backward_weight: grad_bias " << grad_bias.describe());
    if (n > 0 && m > 0) {
      const dim3 block(kColTile, kRowLanes);
      const dim3 grid(static_cast<unsigned int>((m + kColTile - 1) / kColTile));
      column_sum_accumulate_kernel<<<grid, block, 0, stream_of(dev)>>>(grad_y.data<float>(), grad_bias.data<float>(),
                                                                       n, m);
      PW_CUDA_CHECK_LAUNCH();
    }
  }
}

// c[M, N] = op(a) * op(b)  ==  column-major c^T[N, M] = op(b)^T * op(a)^T. The buffer of b read
// column-major is b^T, so op(b)^T is that buffer as is when b is not transposed (CUBLAS_OP_N),
// and its transpose when it is (CUBLAS_OP_T); the same for a. Leading dimensions are the row
// lengths of the stored (row-major) matrices.
Tensor matmul(const Tensor& a, const Tensor& b, Transpose ta, Transpose tb) {
  check_matrix(a, "matmul: a");
  check_matrix(b, "matmul: b");
  const bool trans_a = ta == Transpose::Yes;
  const bool trans_b = tb == Transpose::Yes;
  const std::int64_t m = trans_a ? a.dim(1) : a.dim(0);
  const std::int64_t k = trans_a ? a.dim(0) : a.dim(1);
  const std::int64_t kb = trans_b ? b.dim(1) : b.dim(0);
  const std::int64_t n = trans_b ? b.dim(0) : b.dim(1);
  PW_CHECK(k == kb, "matmul: inner dimensions differ: " << a.describe() << " and " << b.describe());
  const Device dev = a.device();
  CudaDeviceGuard guard(dev.index);
  Tensor c = Tensor::empty({m, n}, DType::F32, dev);
  if (m == 0 || n == 0) return c;
  if (k == 0) {
    c.zero_();
    return c;
  }
  sgemm(dev, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, b.data<float>(),
        b.dim(1), a.data<float>(), a.dim(1), 0.0f, c.data<float>(), n);
  return c;
}

}  // namespace pw::kernels::cuda
