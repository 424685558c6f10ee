#include "kernels/stream.h"

#include <chrono>
#include <mutex>
#include <unordered_map>

#include "core/log.h"
#include "kernels/cuda_check.h"

namespace pw::kernels {
namespace {
double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
thread_local std::unordered_map<Device, Stream*> t_current;
}  // namespace

Stream::Stream(Device device) : device_(device) {
  if (device.is_cuda()) {
#ifdef PW_WITH_CUDA
    CudaDeviceGuard guard(device.index);
    cudaStream_t s = nullptr;
    PW_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    handle_ = s;
#else
    throw Error("pipewright was built without CUDA; no stream on " + device.str());
#endif
  }
}

Stream::~Stream() {
#ifdef PW_WITH_CUDA
  if (handle_ != nullptr) {
    const cudaError_t err = cudaStreamDestroy(static_cast<cudaStream_t>(handle_));
    if (err != cudaSuccess) PW_LOG(Warn, "cudaStreamDestroy: " << cudaGetErrorString(err));
  }
#endif
}

Stream::Stream(Stream&& other) noexcept : device_(other.device_), handle_(other.handle_) { other.handle_ = nullptr; }
Stream& Stream::operator=(Stream&& other) noexcept {
  std::swap(device_, other.device_);
  std::swap(handle_, other.handle_);
  return *this;
}

void Stream::synchronize() const {
#ifdef PW_WITH_CUDA
  if (handle_ != nullptr) PW_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(handle_)));
#endif
}

Event::Event(Device device) : device_(device) {
  if (device.is_cuda()) {
#ifdef PW_WITH_CUDA
    CudaDeviceGuard guard(device.index);
    cudaEvent_t e = nullptr;
    PW_CUDA_CHECK(cudaEventCreate(&e));
    handle_ = e;
#else
    throw Error("pipewright was built without CUDA; no event on " + device.str());
#endif
  }
}

Event::~Event() {
#ifdef PW_WITH_CUDA
  if (handle_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(handle_));
#endif
}

Event::Event(Event&& other) noexcept : device_(other.device_), handle_(other.handle_), cpu_time_ms_(other.cpu_time_ms_) {
  other.handle_ = nullptr;
}
Event& Event::operator=(Event&& other) noexcept {
  std::swap(device_, other.device_);
  std::swap(handle_, other.handle_);
  std::swap(cpu_time_ms_, other.cpu_time_ms_);
  return *this;
}

void Event::record(const Stream& stream) {
  cpu_time_ms_ = now_ms();
#ifdef PW_WITH_CUDA
  if (handle_ != nullptr)
    PW_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(handle_), static_cast<cudaStream_t>(stream.native())));
#else
  (void)stream;
#endif
}

void Event::wait_on(const Stream& stream) const {
#ifdef PW_WITH_CUDA
  if (handle_ != nullptr && stream.native() != nullptr)
    PW_CUDA_CHECK(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream.native()), static_cast<cudaEvent_t>(handle_), 0));
#else
  (void)stream;
#endif
}

void Event::synchronize() const {
#ifdef PW_WITH_CUDA
  if (handle_ != nullptr) PW_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(handle_)));
#endif
}

bool Event::done() const {
#ifdef PW_WITH_CUDA
  if (handle_ != nullptr) {
    // cudaEventQuery reports "not yet" as the error cudaErrorNotReady, which would also stay behind as
    // the thread's last error and fail the next checked kernel launch: take it off again.
    const cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(handle_));
    if (err == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    PW_CUDA_CHECK(err);
    return true;
  }
#endif
  return true;
}

float Event::elapsed_ms(const Event& start, const Event& end) {
#ifdef PW_WITH_CUDA
  if (start.handle_ != nullptr && end.handle_ != nullptr) {
    float ms = 0.0f;
    PW_CUDA_CHECK(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start.handle_), static_cast<cudaEvent_t>(end.handle_)));
    return ms;
  }
#endif
  return static_cast<float>(end.cpu_time_ms_ - start.cpu_time_ms_);
}

Stream& current_stream(Device device) {
  auto it = t_current.find(device);
  if (it != t_current.end()) return *it->second;
  // One default stream per device for the whole process.
  static std::mutex mutex;
  static std::unordered_map<Device, std::unique_ptr<Stream>> defaults;
  std::lock_guard lock(mutex);
  auto& slot = defaults[device];
  if (!slot) slot = std::make_unique<Stream>(device);
  return *slot;
}

StreamGuard::StreamGuard(Stream& stream) : device_(stream.device()) {
  auto it = t_current.find(device_);
  previous_ = it == t_current.end() ? nullptr : it->second;
  t_current[device_] = &stream;
}

StreamGuard::~StreamGuard() {
  if (previous_ == nullptr) t_current.erase(device_);
  else t_current[device_] = previous_;
}

}  // namespace pw::kernels
