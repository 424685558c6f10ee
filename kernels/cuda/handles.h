#pragma once
// cuBLAS / cuDNN handles and cuDNN descriptors as RAII types, and the per-thread, per-device
// accessors the CUDA ops use. Each thread gets its own handles for each device (stage threads that
// share a GPU never share a handle); every accessor binds the handle to current_stream(device).
#include <cstddef>
#include <cstdint>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "kernels/cuda_check.h"
#include "kernels/math_mode.h"
#include "kernels/stream.h"
#include "kernels/tensor.h"

namespace pw::kernels::cuda {

// ---- handles ------------------------------------------------------------------------------------

class CublasHandle {
 public:
  explicit CublasHandle(int device_index);   // creates on that device, CUBLAS_DEFAULT_MATH (no TF32)
  ~CublasHandle();
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

class CudnnHandle {
 public:
  explicit CudnnHandle(int device_index);
  ~CudnnHandle();
  CudnnHandle(const CudnnHandle&) = delete;
  CudnnHandle& operator=(const CudnnHandle&) = delete;
  cudnnHandle_t get() const { return handle_; }

 private:
  cudnnHandle_t handle_ = nullptr;
};

// ---- descriptors --------------------------------------------------------------------------------

class TensorDescriptor {
 public:
  TensorDescriptor();
  ~TensorDescriptor();
  TensorDescriptor(const TensorDescriptor&) = delete;
  TensorDescriptor& operator=(const TensorDescriptor&) = delete;
  // Packed NCHW float.
  void set_nchw(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w);
  cudnnTensorDescriptor_t get() const { return desc_; }

 private:
  cudnnTensorDescriptor_t desc_ = nullptr;
};

class FilterDescriptor {
 public:
  FilterDescriptor();
  ~FilterDescriptor();
  FilterDescriptor(const FilterDescriptor&) = delete;
  FilterDescriptor& operator=(const FilterDescriptor&) = delete;
  // [k (out channels), c (in channels), h, w], float, NCHW.
  void set_kchw(std::int64_t k, std::int64_t c, std::int64_t h, std::int64_t w);
  cudnnFilterDescriptor_t get() const { return desc_; }

 private:
  cudnnFilterDescriptor_t desc_ = nullptr;
};

class ConvolutionDescriptor {
 public:
  ConvolutionDescriptor();
  ~ConvolutionDescriptor();
  ConvolutionDescriptor(const ConvolutionDescriptor&) = delete;
  ConvolutionDescriptor& operator=(const ConvolutionDescriptor&) = delete;
  // Cross-correlation (what deep-learning "convolution" means), float compute, no dilation or
  // groups, CUDNN_FMA_MATH so no TF32 tensor-core kernels are picked.
  void set_2d(int pad_h, int pad_w, int stride_h, int stride_w, Tf32 tf32);
  cudnnConvolutionDescriptor_t get() const { return desc_; }

 private:
  cudnnConvolutionDescriptor_t desc_ = nullptr;
};

class PoolingDescriptor {
 public:
  PoolingDescriptor();
  ~PoolingDescriptor();
  PoolingDescriptor(const PoolingDescriptor&) = delete;
  PoolingDescriptor& operator=(const PoolingDescriptor&) = delete;
  void set_2d(cudnnPoolingMode_t mode, int kernel_h, int kernel_w, int pad_h, int pad_w, int stride_h, int stride_w);
  cudnnPoolingDescriptor_t get() const { return desc_; }

 private:
  cudnnPoolingDescriptor_t desc_ = nullptr;
};

// ---- per-thread, per-device accessors ------------------------------------------------------------
// Both make sure the handle exists for (this thread, device) and bind it to current_stream(device).
// Call them with a CudaDeviceGuard for `device` in scope.

cublasHandle_t cublas_handle(Device device);
cudnnHandle_t cudnn_handle(Device device);

// The stream ops on `device` launch on from this thread.
inline cudaStream_t stream_of(Device device) { return static_cast<cudaStream_t>(current_stream(device).native()); }

// Scratch memory of at least `bytes` for one cuDNN call: a buffer owned by (this thread, device),
// allocated through the device's caching allocator (so it counts against the memory cap; over
// the cap the constructor throws OutOfMemory) and kept for later calls. Construct it, enqueue the
// call that uses get(), then let it go: the destructor records the point on the stream after
// which the buffer is free again, so a later lease on another stream of this thread waits for
// that point (no host sync) and a growth waits for it before the old block goes back to the
// shared cache. One lease at a time per thread and device. get() is nullptr for 0 bytes.
class WorkspaceLease {
 public:
  WorkspaceLease(Device device, std::size_t bytes);
  ~WorkspaceLease();
  WorkspaceLease(const WorkspaceLease&) = delete;
  WorkspaceLease& operator=(const WorkspaceLease&) = delete;
  void* get() const { return ptr_; }

 private:
  Device device_;
  void* ptr_ = nullptr;
};

// Largest workspace a convolution algorithm may ask for before a cheaper one is preferred.
constexpr std::size_t kMaxConvWorkspaceBytes = std::size_t{1} << 30;

}  // namespace pw::kernels::cuda
