#include "kernels/runtime.h"

#include <omp.h>

#include <mutex>
#include <thread>
#include <unordered_map>

#include <tbb/task_arena.h>

namespace pw::kernels {

struct DeviceRuntime::Arena {
  explicit Arena(int threads) : arena(threads) {}
  tbb::task_arena arena;
};

DeviceRuntime& DeviceRuntime::get(Device device) {
  static std::mutex mutex;
  static auto* runtimes = new std::unordered_map<Device, std::unique_ptr<DeviceRuntime>>();  // lives to exit
  std::lock_guard lock(mutex);
  auto& slot = (*runtimes)[device];
  if (!slot) slot = std::make_unique<DeviceRuntime>(device);
  return *slot;
}

DeviceRuntime::DeviceRuntime(Device device)
    : device_(device), allocator_(device), threads_(std::max(1u, std::thread::hardware_concurrency())) {
  arena_ = std::make_unique<Arena>(threads_);
}

DeviceRuntime::~DeviceRuntime() = default;

void DeviceRuntime::set_threads(int threads) {
  PW_INPUT_CHECK(threads >= 1, "bad thread count " << threads << " for " << device_.str() << "; expected >= 1");
  if (threads == threads_) return;
  threads_ = threads;
  arena_ = std::make_unique<Arena>(threads);
}

void DeviceRuntime::execute(const std::function<void()>& work) {
  if (device_.is_cuda()) {
    work();
    return;
  }
  // omp_set_num_threads sets the calling thread's own setting, so stage threads that drive
  // different CPU devices each keep their own count for oneDNN's parallel regions.
  if (omp_get_max_threads() != threads_) omp_set_num_threads(threads_);
  arena_->arena.execute(work);
}

}  // namespace pw::kernels
