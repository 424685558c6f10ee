#pragma once
// Per-device runtime state: the caching allocator (with its cap) and, for CPU devices, the thread
// arena that the device's ops run in. Several logical CPU devices (cpu:0, cpu:1, ...) live in one
// process, each with its own cap and its own number of threads.
#include <functional>
#include <memory>

#include "kernels/allocator.h"
#include "kernels/device.h"

namespace pw::kernels {

class DeviceRuntime {
 public:
  static DeviceRuntime& get(Device device);

  explicit DeviceRuntime(Device device);
  ~DeviceRuntime();
  DeviceRuntime(const DeviceRuntime&) = delete;
  DeviceRuntime& operator=(const DeviceRuntime&) = delete;

  Device device() const { return device_; }
  CachingAllocator& allocator() { return allocator_; }
  void set_memory_cap(std::int64_t bytes) { allocator_.set_cap(bytes); }

  // Threads of a CPU device (default: the machine's hardware threads). Ignored for CUDA.
  void set_threads(int threads);
  int threads() const { return threads_; }

  // Runs `work` in this device's thread arena with oneDNN/OpenMP limited to its thread count.
  void execute(const std::function<void()>& work);

 private:
  struct Arena;
  Device device_;
  CachingAllocator allocator_;
  int threads_;
  std::unique_ptr<Arena> arena_;
};

}  // namespace pw::kernels
