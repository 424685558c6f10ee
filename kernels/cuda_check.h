#pragma once
// PW_CUDA_CHECK / PW_CUBLAS_CHECK / PW_CUDNN_CHECK / PW_NCCL_CHECK and a device guard.
// Compiles to nothing CUDA-related when PW_WITH_CUDA is off.
#include "core/error.h"

#ifdef PW_WITH_CUDA
#include <cuda_runtime.h>

#define PW_CUDA_CHECK(expr)                                                                 \
  do {                                                                                      \
    const cudaError_t pw_err_ = (expr);                                                     \
    if (pw_err_ != cudaSuccess)                                                             \
      ::pw::detail::throw_error(__FILE__, __LINE__, #expr,                                  \
                                std::string("CUDA error: ") + cudaGetErrorString(pw_err_)); \
  } while (0)

// After a kernel launch: checks the launch itself (not completion).
#define PW_CUDA_CHECK_LAUNCH() PW_CUDA_CHECK(cudaGetLastError())

#define PW_CUBLAS_CHECK(expr)                                                                 \
  do {                                                                                        \
    const auto pw_st_ = (expr);                                                               \
    if (pw_st_ != 0)                                                                          \
      ::pw::detail::throw_error(__FILE__, __LINE__, #expr,                                    \
                                ::pw::kernels::cublas_error_text(static_cast<int>(pw_st_)));  \
  } while (0)

// cuDNN 9 keeps a detailed message for the last failure on each thread; it goes into the error.
#define PW_CUDNN_CHECK(expr)                                                                  \
  do {                                                                                        \
    const cudnnStatus_t pw_st_ = (expr);                                                      \
    if (pw_st_ != CUDNN_STATUS_SUCCESS)                                                       \
      ::pw::detail::throw_error(__FILE__, __LINE__, #expr, ::pw::kernels::cudnn_error_text(pw_st_)); \
  } while (0)

#define PW_NCCL_CHECK(expr)                                                                   \
  do {                                                                                        \
    const ncclResult_t pw_st_ = (expr);                                                       \
    if (pw_st_ != ncclSuccess)                                                                \
      ::pw::detail::throw_error(__FILE__, __LINE__, #expr,                                    \
                                std::string("NCCL error: ") + ncclGetErrorString(pw_st_));    \
  } while (0)

namespace pw::kernels {
// "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED_SHAPE (3002): <cudnnGetLastErrorString>". Takes the
// status as an int so that this header needs no cudnn.h.
std::string cudnn_error_text(int status);
std::string cublas_error_text(int status);   // "cuBLAS error: CUBLAS_STATUS_... (n)"

// Makes `index` the current CUDA device for a scope and restores the previous one.
class CudaDeviceGuard {
 public:
  explicit CudaDeviceGuard(int index) {
    PW_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != index) {
      PW_CUDA_CHECK(cudaSetDevice(index));
      switched_ = true;
    }
  }
  // Restores only what it changed: every op takes a guard, and a resnet50 step on one GPU made
  // about a thousand cudaSetDevice calls that changed nothing.
  ~CudaDeviceGuard() {
    if (switched_) cudaSetDevice(previous_);
  }
  CudaDeviceGuard(const CudaDeviceGuard&) = delete;
  CudaDeviceGuard& operator=(const CudaDeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool switched_ = false;
};
}  // namespace pw::kernels
#endif
