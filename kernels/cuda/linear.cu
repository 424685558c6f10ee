// Fully connected layers and matmul on CUDA via cuBLAS: SGEMM for F32 (CUBLAS_DEFAULT_MATH: FP32, no
// TF32, unless the math mode allows TF32), and cublasGemmEx for BF16 and F16 (16-bit A and B on
// tensor cores, F32 accumulation; the result rounded once to the data type, or kept in F32 for the
// weight gradient, which accumulates into the F32 master gradient with beta = 1).
//
// cuBLAS is column-major. A row-major [R, C] buffer read column-major is its transpose [C, R]
// with leading dimension C, so a row-major product Y = A * B is computed as the column-major
// product Y^T = B^T * A^T over the same buffers, with the operands swapped.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/ops.h"

#include <limits>

namespace pw::kernels::cuda {
namespace {

using detail::blocks_for;
using detail::kThreads;
using detail::load;
using detail::store;

// ---- kernels ------------------------------------------------------------------------------------

// y[n, m] = bias[m] for every row: the GEMM then adds x * w^T with beta = 1.
__global__ void broadcast_rows_kernel(const float* __restrict__ bias, float* __restrict__ y, std::int64_t rows,
                                      std::int64_t cols) {
  const std::int64_t total = rows * cols;
  PW_CUDA_KERNEL_LOOP(i, total) { y[i] = bias[i % cols]; }
}

// y[n, m] = T(acc[n, m] + bias[m]): the F32 product and the F32 bias added before the one rounding
// to the 16-bit output (as the CPU backend's oneDNN matmul does). acc == nullptr: a zero product (K = 0).
template <typename T>
__global__ void add_bias_rows_round_kernel(const float* __restrict__ acc, const float* __restrict__ bias,
                                           T* __restrict__ y, std::int64_t rows, std::int64_t cols) {
  const std::int64_t total = rows * cols;
  PW_CUDA_KERNEL_LOOP(i, total) { y[i] = store<T>((acc != nullptr ? acc[i] : 0.0f) + bias[i % cols]); }
}

// grad_bias[m] += sum_n grad_y[n, m] (grad_y F32, BF16 or F16; the sum and grad_bias F32).
// Block = 32 columns x 8 row lanes; each lane walks the rows with stride 8, then the 8 lanes are
// added in shared memory in a fixed order (deterministic).
constexpr int kColTile = 32;
constexpr int kRowLanes = 8;
template <typename T>
__global__ void column_sum_accumulate_kernel(const T* __restrict__ grad_y, float* __restrict__ grad_bias,
                                             std::int64_t rows, std::int64_t cols) {
  __shared__ float partial[kRowLanes][kColTile];
  const std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * kColTile + threadIdx.x;
  float acc = 0.0f;
  if (col < cols) {
    for (std::int64_t r = threadIdx.y; r < rows; r += kRowLanes) acc += load(grad_y[r * cols + col]);
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

cudaDataType_t blas_type(DType dtype) {
  switch (dtype) {
    case DType::F32: return CUDA_R_32F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::F16: return CUDA_R_16F;
    default: PW_FAIL("cuBLAS: no matrix type for " << dtype_name(dtype));
  }
}

// The same product with 16-bit A and B (`ab`), C of dtype `c_type` (the same 16-bit type, or F32),
// CUBLAS_COMPUTE_32F (F32 accumulation; cuBLAS runs 16-bit inputs on tensor cores under its default
// math mode). Reductions stay in F32 even where cuBLAS splits K: the handle's math mode forbids
// reduced-precision (16-bit) partial sums for this call; cublas_handle() sets the mode on every use,
// so the flag does not carry over to later calls.
void gemm_ex(Device dev, cublasOperation_t op_a, cublasOperation_t op_b, std::int64_t m, std::int64_t n,
             std::int64_t k, DType ab, const void* a, std::int64_t lda, const void* b, std::int64_t ldb, float beta,
             DType c_type, void* c, std::int64_t ldc) {
  const float alpha = 1.0f;
  cublasHandle_t handle = cublas_handle(dev);
  PW_CUBLAS_CHECK(cublasSetMathMode(
      handle, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
  PW_CUBLAS_CHECK(cublasGemmEx(handle, op_a, op_b, blas_int(m, "m"), blas_int(n, "n"), blas_int(k, "k"), &alpha, a,
                               blas_type(ab), blas_int(std::max<std::int64_t>(lda, 1), "lda"), b, blas_type(ab),
                               blas_int(std::max<std::int64_t>(ldb, 1), "ldb"), &beta, c, blas_type(c_type),
                               blas_int(std::max<std::int64_t>(ldc, 1), "ldc"), CUBLAS_COMPUTE_32F,
                               CUBLAS_GEMM_DEFAULT));
}

// Column-major C = op(A) * op(B) + beta * C over row-major buffers of dtype `data` (A, B and C all
// `data`; F32 by SGEMM, 16-bit by gemm_ex).
void gemm(Device dev, DType data, cublasOperation_t op_a, cublasOperation_t op_b, std::int64_t m, std::int64_t n,
          std::int64_t k, const Tensor& a, std::int64_t lda, const Tensor& b, std::int64_t ldb, float beta, Tensor& c,
          std::int64_t ldc) {
  if (data == DType::F32) {
    sgemm(dev, op_a, op_b, m, n, k, a.data<float>(), lda, b.data<float>(), ldb, beta, c.data<float>(), ldc);
  } else {
    gemm_ex(dev, op_a, op_b, m, n, k, data, a.raw(), lda, b.raw(), ldb, beta, data, c.raw(), ldc);
  }
}

void check_matrix(const Tensor& t, const char* what) {
  detail::require_cuda_float(t, what);
  PW_CHECK(t.ndim() == 2, "" << what << " must be 2-D, got " << t.describe());
}

void check_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  PW_CHECK(a.dtype() == b.dtype(), "" << op << ": " << a.describe() << " and " << b.describe() << " differ in dtype");
}

void accumulate_column_sums(Device dev, const Tensor& grad_y, Tensor& grad_bias, std::int64_t n, std::int64_t m) {
  const dim3 block(kColTile, kRowLanes);
  const dim3 grid(static_cast<unsigned int>((m + kColTile - 1) / kColTile));
  detail::visit_cuda_float(grad_y.dtype(), "linear_backward_weight", [&](auto tag) {
    using T = decltype(tag);
    column_sum_accumulate_kernel<T><<<grid, block, 0, stream_of(dev)>>>(grad_y.data<T>(), grad_bias.data<float>(), n, m);
    PW_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

// ---- launchers ----------------------------------------------------------------------------------

// y[N, M] = x[N, K] * w[M, K]^T + b  ==  column-major y^T[M, N] = w^T(op T of w's [K, M] view) * x^T.
// 16-bit with a bias: the product goes to an F32 scratch, then bias and rounding in one pass.
Tensor linear_forward(const Tensor& x, const Tensor& w, const Tensor& bias) {
  check_matrix(x, "linear_forward: x");
  check_matrix(w, "linear_forward: w");
  check_same_dtype(x, w, "linear_forward");
  const std::int64_t n = x.dim(0), k = x.dim(1), m = w.dim(0);
  PW_CHECK(w.dim(1) == k, "linear_forward: x " << x.describe() << " and w " << w.describe() << " disagree on K");
  const Device dev = x.device();
  const DType data = x.dtype();
  CudaDeviceGuard guard(dev.index);
  Tensor y = Tensor::empty({n, m}, data, dev);
  if (n == 0 || m == 0) return y;
  const cudaStream_t stream = stream_of(dev);
  if (bias.defined()) {
    detail::require_f32(bias, "linear_forward: bias");
    PW_CHECK(bias.numel() == m, "linear_forward: bias " << bias.describe() << " for " << m << " outputs");
  }
  if (data != DType::F32) {
    if (!bias.defined()) {
      if (k == 0) {
        y.zero_();
        return y;
      }
      gemm_ex(dev, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, data, w.raw(), k, x.raw(), k, 0.0f, data, y.raw(), m);
      return y;
    }
    Tensor acc;
    if (k > 0) {
      acc = Tensor::empty({n, m}, DType::F32, dev);
      gemm_ex(dev, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, data, w.raw(), k, x.raw(), k, 0.0f, DType::F32, acc.raw(), m);
    }
    detail::visit_cuda_float(data, "linear_forward", [&](auto tag) {
      using T = decltype(tag);
      add_bias_rows_round_kernel<T><<<blocks_for(n * m), kThreads, 0, stream>>>(
          acc.defined() ? acc.data<float>() : nullptr, bias.data<float>(), y.data<T>(), n, m);
      PW_CUDA_CHECK_LAUNCH();
    });
    return y;
  }
  float beta = 0.0f;
  if (bias.defined()) {
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
  check_same_dtype(grad_y, w, "linear_backward_data");
  const std::int64_t n = grad_y.dim(0), m = grad_y.dim(1), k = w.dim(1);
  PW_CHECK(w.dim(0) == m, "linear_backward_data: grad_y " << grad_y.describe() << " and w " << w.describe()
                                                          << " disagree on M");
  const Device dev = grad_y.device();
  CudaDeviceGuard guard(dev.index);
  Tensor grad_x = Tensor::empty({n, k}, grad_y.dtype(), dev);
  if (n == 0 || k == 0) return grad_x;
  if (m == 0) {
    grad_x.zero_();
    return grad_x;
  }
  gemm(dev, grad_y.dtype(), CUBLAS_OP_N, CUBLAS_OP_N, k, n, m, w, k, grad_y, m, 0.0f, grad_x, k);
  return grad_x;
}

// grad_w[M, K] += grad_y^T[M, N] * x[N, K]  ==  column-major grad_w^T[K, M] += x^T[K, N] * grad_y[N, M]
// (grad_y's buffer read column-major is grad_y^T[M, N], so it enters with op T). grad_w and
// grad_bias are F32 for every data type: 16-bit products accumulate straight into them.
void linear_backward_weight(const Tensor& x, const Tensor& grad_y, Tensor& grad_w, Tensor& grad_bias) {
  check_matrix(x, "linear_backward_weight: x");
  check_matrix(grad_y, "linear_backward_weight: grad_y");
  check_same_dtype(x, grad_y, "linear_backward_weight");
  detail::require_f32(grad_w, "linear_backward_weight: grad_w");
  const std::int64_t n = x.dim(0), k = x.dim(1), m = grad_y.dim(1);
  PW_CHECK(grad_y.dim(0) == n && grad_w.numel() == m * k,
           "linear_backward_weight: x " << x.describe() << ", grad_y " << grad_y.describe() << ", grad_w "
                                        << grad_w.describe());
  const Device dev = x.device();
  CudaDeviceGuard guard(dev.index);
  if (n > 0 && m > 0 && k > 0) {
    if (x.dtype() == DType::F32) {
      sgemm(dev, CUBLAS_OP_N, CUBLAS_OP_T, k, m, n, x.data<float>(), k, grad_y.data<float>(), m, 1.0f,
            grad_w.data<float>(), k);
    } else {
      gemm_ex(dev, CUBLAS_OP_N, CUBLAS_OP_T, k, m, n, x.dtype(), x.raw(), k, grad_y.raw(), m, 1.0f, DType::F32,
              grad_w.raw(), k);
    }
  }
  if (grad_bias.defined()) {
    detail::require_f32(grad_bias, "linear_backward_weight: grad_bias");
    PW_CHECK(grad_bias.numel() == m, "linear_backward_weight: grad_bias " << grad_bias.describe());
    if (n > 0 && m > 0) accumulate_column_sums(dev, grad_y, grad_bias, n, m);
  }
}

// c[M, N] = op(a) * op(b)  ==  column-major c^T[N, M] = op(b)^T * op(a)^T. The buffer of b read
// column-major is b^T, so op(b)^T is that buffer as is when b is not transposed (CUBLAS_OP_N),
// and its transpose when it is (CUBLAS_OP_T); the same for a. Leading dimensions are the row
// lengths of the stored (row-major) matrices.
Tensor matmul(const Tensor& a, const Tensor& b, Transpose ta, Transpose tb) {
  check_matrix(a, "matmul: a");
  check_matrix(b, "matmul: b");
  check_same_dtype(a, b, "matmul");
  const bool trans_a = ta == Transpose::Yes;
  const bool trans_b = tb == Transpose::Yes;
  const std::int64_t m = trans_a ? a.dim(1) : a.dim(0);
  const std::int64_t k = trans_a ? a.dim(0) : a.dim(1);
  const std::int64_t kb = trans_b ? b.dim(1) : b.dim(0);
  const std::int64_t n = trans_b ? b.dim(0) : b.dim(1);
  PW_CHECK(k == kb, "matmul: inner dimensions differ: " << a.describe() << " and " << b.describe());
  const Device dev = a.device();
  CudaDeviceGuard guard(dev.index);
  Tensor c = Tensor::empty({m, n}, a.dtype(), dev);
  if (m == 0 || n == 0) return c;
  if (k == 0) {
    c.zero_();
    return c;
  }
  gemm(dev, a.dtype(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, b, b.dim(1),
       a, a.dim(1), 0.0f, c, n);
  return c;
}

}  // namespace pw::kernels::cuda
