#include "kernels/cuda/handles.h"

#include <limits>
#include <memory>
#include <unordered_map>

#include "core/log.h"

namespace pw::kernels::cuda {
namespace {

int checked_int(std::int64_t v, const char* what) {
  PW_CHECK(v >= 0 && v <= std::numeric_limits<int>::max(), "" << what << " " << v << " does not fit cuDNN's int dimensions");
  return static_cast<int>(v);
}

// Everything one thread holds for one device. Destroyed when the thread exits.
struct ThreadDeviceState {
  int device_index = 0;
  std::unique_ptr<CublasHandle> cublas;
  std::unique_ptr<CudnnHandle> cudnn;
  Tensor workspace;                        // U8, from the caching allocator
  cudaStream_t workspace_stream = nullptr;  // the stream of the last lease
  cudaEvent_t workspace_event = nullptr;    // recorded on it after the last lease's call
  bool workspace_recorded = false;          // workspace_event marks the last use
  bool workspace_leased = false;

  explicit ThreadDeviceState(int index) : device_index(index) {}
  ThreadDeviceState(const ThreadDeviceState&) = delete;
  ThreadDeviceState& operator=(const ThreadDeviceState&) = delete;
  ~ThreadDeviceState() {
    // The workspace goes back to the shared cache: its last user (on this thread's stream) must be done.
    if (workspace_event != nullptr && workspace_recorded && cudaEventSynchronize(workspace_event) != cudaSuccess)
      cudaGetLastError();
    if (workspace_event != nullptr) {
      const cudaError_t err = cudaEventDestroy(workspace_event);
      if (err != cudaSuccess) PW_LOG(Warn, "cudaEventDestroy: " << cudaGetErrorString(err));
    }
  }
};

ThreadDeviceState& thread_state(Device device) {
  PW_CHECK(device.is_cuda(), "CUDA handle requested for " << device.str());
  thread_local std::unordered_map<int, std::unique_ptr<ThreadDeviceState>> states;
  auto& slot = states[device.index];
  if (!slot) slot = std::make_unique<ThreadDeviceState>(device.index);
  return *slot;
}

}  // namespace

}  // namespace pw::kernels::cuda

namespace pw::kernels {

std::string cudnn_error_text(int status) {
  const auto st = static_cast<cudnnStatus_t>(status);
  std::string text = std::string("cuDNN error: ") + cudnnGetErrorString(st) + " (" + std::to_string(status) + ")";
  char detail[1024] = {0};
  cudnnGetLastErrorString(detail, sizeof detail);
  if (detail[0] != '\0') text += std::string(": ") + detail;
  return text;
}

std::string cublas_error_text(int status) {
  return std::string("cuBLAS error: ") + cublasGetStatusString(static_cast<cublasStatus_t>(status)) + " (" +
         std::to_string(status) + ")";
}

}  // namespace pw::kernels

namespace pw::kernels::cuda {

// ---- handles ------------------------------------------------------------------------------------

CublasHandle::CublasHandle(int device_index) {
  CudaDeviceGuard guard(device_index);
  PW_CUBLAS_CHECK(cublasCreate(&handle_));
  // Plain FP32 FMA math (no TF32 tensor cores) unless the math mode allows TF32: cublas_handle sets it per use.
  PW_CUBLAS_CHECK(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH));
  PW_CUBLAS_CHECK(cublasSetPointerMode(handle_, CUBLAS_POINTER_MODE_HOST));
}

CublasHandle::~CublasHandle() {
  if (handle_ == nullptr) return;
  const cublasStatus_t st = cublasDestroy(handle_);
  if (st != CUBLAS_STATUS_SUCCESS) PW_LOG(Warn, "cublasDestroy: status " << static_cast<int>(st));
}

CudnnHandle::CudnnHandle(int device_index) {
  CudaDeviceGuard guard(device_index);
  PW_CUDNN_CHECK(cudnnCreate(&handle_));
}

CudnnHandle::~CudnnHandle() {
  if (handle_ == nullptr) return;
  const cudnnStatus_t st = cudnnDestroy(handle_);
  if (st != CUDNN_STATUS_SUCCESS) PW_LOG(Warn, "cudnnDestroy: " << cudnnGetErrorString(st));
}

// ---- descriptors --------------------------------------------------------------------------------

TensorDescriptor::TensorDescriptor() { PW_CUDNN_CHECK(cudnnCreateTensorDescriptor(&desc_)); }
TensorDescriptor::~TensorDescriptor() {
  if (desc_ != nullptr) cudnnDestroyTensorDescriptor(desc_);
}
void TensorDescriptor::set_nchw(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w) {
  PW_CUDNN_CHECK(cudnnSetTensor4dDescriptor(desc_, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, checked_int(n, "N"),
                                            checked_int(c, "C"), checked_int(h, "H"), checked_int(w, "W")));
}

FilterDescriptor::FilterDescriptor() { PW_CUDNN_CHECK(cudnnCreateFilterDescriptor(&desc_)); }
FilterDescriptor::~FilterDescriptor() {
  if (desc_ != nullptr) cudnnDestroyFilterDescriptor(desc_);
}
void FilterDescriptor::set_kchw(std::int64_t k, std::int64_t c, std::int64_t h, std::int64_t w) {
  PW_CUDNN_CHECK(cudnnSetFilter4dDescriptor(desc_, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, checked_int(k, "K"),
                                            checked_int(c, "C"), checked_int(h, "KH"), checked_int(w, "KW")));
}

ConvolutionDescriptor::ConvolutionDescriptor() { PW_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&desc_)); }
ConvolutionDescriptor::~ConvolutionDescriptor() {
  if (desc_ != nullptr) cudnnDestroyConvolutionDescriptor(desc_);
}
void ConvolutionDescriptor::set_2d(int pad_h, int pad_w, int stride_h, int stride_w, Tf32 tf32) {
  PW_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(desc_, pad_h, pad_w, stride_h, stride_w, 1, 1,
                                                 CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  // CUDNN_DEFAULT_MATH still allows TF32 on Ampere and newer; FMA_MATH forbids it.
  PW_CUDNN_CHECK(cudnnSetConvolutionMathType(desc_, tf32 == Tf32::On ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH));
}

PoolingDescriptor::PoolingDescriptor() { PW_CUDNN_CHECK(cudnnCreatePoolingDescriptor(&desc_)); }
PoolingDescriptor::~PoolingDescriptor() {
  if (desc_ != nullptr) cudnnDestroyPoolingDescriptor(desc_);
}
void PoolingDescriptor::set_2d(cudnnPoolingMode_t mode, int kernel_h, int kernel_w, int pad_h, int pad_w,
                               int stride_h, int stride_w) {
  PW_CUDNN_CHECK(cudnnSetPooling2dDescriptor(desc_, mode, CUDNN_PROPAGATE_NAN, kernel_h, kernel_w, pad_h, pad_w,
                                             stride_h, stride_w));
}

// ---- accessors ----------------------------------------------------------------------------------

cublasHandle_t cublas_handle(Device device) {
  auto& st = thread_state(device);
  if (!st.cublas) st.cublas = std::make_unique<CublasHandle>(device.index);
  PW_CUBLAS_CHECK(cublasSetStream(st.cublas->get(), stream_of(device)));
  PW_CUBLAS_CHECK(cublasSetMathMode(st.cublas->get(), math_mode().tf32 == Tf32::On ? CUBLAS_TF32_TENSOR_OP_MATH
                                                                                   : CUBLAS_DEFAULT_MATH));
  return st.cublas->get();
}

cudnnHandle_t cudnn_handle(Device device) {
  auto& st = thread_state(device);
  if (!st.cudnn) st.cudnn = std::make_unique<CudnnHandle>(device.index);
  PW_CUDNN_CHECK(cudnnSetStream(st.cudnn->get(), stream_of(device)));
  return st.cudnn->get();
}

WorkspaceLease::WorkspaceLease(Device device, std::size_t bytes) : device_(device) {
  if (bytes == 0) return;
  auto& st = thread_state(device);
  PW_CHECK(!st.workspace_leased, "cuDNN workspace of " << device.str() << " is already leased on this thread");
  const cudaStream_t stream = stream_of(device);
  CudaDeviceGuard guard(device.index);
  if (st.workspace_event == nullptr)
    PW_CUDA_CHECK(cudaEventCreateWithFlags(&st.workspace_event, cudaEventDisableTiming));
  // The event marks the end of the last use (on whatever stream that was, even one destroyed since).
  if (st.workspace_recorded && st.workspace_stream != stream)
    PW_CUDA_CHECK(cudaStreamWaitEvent(stream, st.workspace_event, 0));
  if (!st.workspace.defined() || st.workspace.nbytes() < bytes) {
    if (st.workspace.defined()) {
      // The old block goes back to the shared cache, where another thread may take it at once.
      if (st.workspace_recorded) PW_CUDA_CHECK(cudaEventSynchronize(st.workspace_event));
      st.workspace = Tensor();
    }
    // Round up so a run of slightly growing requests does not reallocate each time.
    constexpr std::size_t kGranule = std::size_t{1} << 20;
    const std::size_t rounded = (bytes + kGranule - 1) / kGranule * kGranule;
    st.workspace = Tensor::empty({static_cast<std::int64_t>(rounded)}, DType::U8, device);
    st.workspace_recorded = false;
  }
  st.workspace_stream = stream;
  st.workspace_leased = true;
  ptr_ = st.workspace.raw();
}

WorkspaceLease::~WorkspaceLease() {
  if (ptr_ == nullptr) return;
  auto& st = thread_state(device_);
  st.workspace_leased = false;
  const cudaError_t err = cudaEventRecord(st.workspace_event, st.workspace_stream);
  if (err == cudaSuccess) {
    st.workspace_recorded = true;
  } else {
    // Without the mark, be conservative: wait for the whole device before anyone reuses the buffer.
    PW_LOG(Warn, "cudaEventRecord after a cuDNN call: " << cudaGetErrorString(err));
    cudaGetLastError();
    st.workspace_recorded = false;
    if (cudaDeviceSynchronize() != cudaSuccess) cudaGetLastError();
  }
}

}  // namespace pw::kernels::cuda
