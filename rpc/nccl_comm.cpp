#include "rpc/nccl_comm.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>

#include "core/clock.h"
#include "core/log.h"
#include "kernels/cuda_check.h"

namespace pw::rpc {
namespace {

// How long a destructor waits for ncclCommFinalize before it aborts instead.
constexpr std::chrono::seconds kFinalizeTimeout{10};
// A non-root rank re-reads the store in slices this long, so a raised AbortFlag ends its wait.
constexpr std::chrono::milliseconds kStoreSlice{100};

// Spins briefly (small messages finish in microseconds), then sleeps up to 1 ms between polls.
class Backoff {
 public:
  void pause() {
    if (++polls_ <= 64) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(delay_);
    delay_ = std::min(delay_ * 2, std::chrono::microseconds{1000});
  }

 private:
  int polls_ = 0;
  std::chrono::microseconds delay_{20};
};

long long ms_since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

}  // namespace

void AbortFlag::raise(const std::string& reason) {
  std::lock_guard lock(mutex_);
  if (raised_.load(std::memory_order_relaxed)) return;
  reason_ = reason;
  raised_.store(true, std::memory_order_release);
}

std::string AbortFlag::reason() const {
  std::lock_guard lock(mutex_);
  return reason_;
}

std::string nccl_unique_id_for(Store& store, const std::string& key, bool is_root, Deadline deadline,
                               const AbortFlag* abort_flag) {
  if (is_root) {
    ncclUniqueId id;
    PW_NCCL_CHECK(ncclGetUniqueId(&id));
    std::string bytes(reinterpret_cast<const char*>(&id), sizeof id);
    store.set(key, bytes);
    return bytes;
  }
  for (;;) {
    if (abort_flag != nullptr && abort_flag->raised())
      throw AbortedError("waiting for the NCCL id '" + key + "' was aborted: " + abort_flag->reason());
    const Deadline slice = abort_flag != nullptr ? std::min(deadline, Clock::now() + kStoreSlice) : deadline;
    try {
      std::string bytes = store.get(key, slice);
      PW_CHECK(bytes.size() == sizeof(ncclUniqueId),
               "store key '" << key << "' holds " << bytes.size() << " bytes, not an NCCL unique id ("
                             << sizeof(ncclUniqueId) << " bytes)");
      return bytes;
    } catch (const TimeoutError&) {
      if (Clock::now() >= deadline) throw;
    }
  }
}

template <typename Step>
void NcclComm::poll(Step step, const std::string& what, Deadline deadline, const AbortFlag* abort_flag) {
  const auto start = Clock::now();
  Backoff backoff;
  for (;;) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t got = ncclCommGetAsyncError(native(), &state);
    if (got != ncclSuccess) fail(got, what);
    if (state != ncclSuccess && state != ncclInProgress) fail(state, what);
    if (step(state) == Progress::Done) return;
    if (abort_flag != nullptr && abort_flag->raised()) {
      abort();
      throw AbortedError(what + " was aborted: " + abort_flag->reason());
    }
    if (Clock::now() >= deadline) {
      const long long waited = ms_since(start);
      abort();
      throw TimeoutError(what + ": timed out after " + std::to_string(waited) + " ms (" + describe() + ")");
    }
    backoff.pause();
  }
}

void NcclComm::fail(ncclResult_t result, const std::string& what) {
  std::string detail = ncclGetErrorString(result);
  if (comm_ != nullptr) {
    const char* last = ncclGetLastError(comm_);
    if (last != nullptr && *last != '\0') detail += std::string(" (") + last + ")";
  }
  abort();
  throw Error(what + ": NCCL error: " + detail + " (" + describe() + ")");
}

std::string NcclComm::describe() const {
  return "NCCL communicator '" + name_ + "', rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
         " on " + device_.str();
}

NcclComm::NcclComm(const std::string& unique_id, int rank, int size, kernels::Device device, std::string name,
                   Deadline deadline, const AbortFlag* abort_flag)
    : rank_(rank), size_(size), device_(device), name_(std::move(name)) {
  PW_CHECK(device.is_cuda(), describe() << ": NCCL needs a CUDA device");
  PW_CHECK(size >= 1 && rank >= 0 && rank < size, describe() << ": rank out of range");
  PW_CHECK(unique_id.size() == sizeof(ncclUniqueId), describe() << ": an NCCL unique id has "
                                                                << sizeof(ncclUniqueId) << " bytes, got "
                                                                << unique_id.size());
  ncclUniqueId id;
  std::memcpy(&id, unique_id.data(), sizeof id);
  kernels::CudaDeviceGuard guard(device.index);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;   // every call returns at once; readiness and errors are polled
  ncclComm_t comm = nullptr;
  const ncclResult_t started = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  comm_ = comm;
  if (started != ncclSuccess && started != ncclInProgress) {
    if (comm_ == nullptr) throw Error(describe() + ": ncclCommInitRankConfig: " + ncclGetErrorString(started));
    fail(started, "joining the communicator");
  }
  try {
    poll([](ncclResult_t state) { return state == ncclSuccess ? Progress::Done : Progress::Pending; },
         "waiting for all " + std::to_string(size) + " ranks to join", deadline, abort_flag);
  } catch (...) {
    abort();   // no destructor runs for a half-built object
    throw;
  }
}

NcclComm::~NcclComm() { release(); }

NcclComm::NcclComm(NcclComm&& other) noexcept
    : comm_(std::exchange(other.comm_, nullptr)), rank_(other.rank_), size_(other.size_), device_(other.device_),
      name_(std::move(other.name_)) {}

NcclComm& NcclComm::operator=(NcclComm&& other) noexcept {
  if (this != &other) {
    release();
    comm_ = std::exchange(other.comm_, nullptr);
    rank_ = other.rank_;
    size_ = other.size_;
    device_ = other.device_;
    name_ = std::move(other.name_);
  }
  return *this;
}

ncclComm_t NcclComm::native() const {
  PW_CHECK(comm_ != nullptr, describe() << " was aborted after an earlier error");
  return comm_;
}

void NcclComm::check_enqueued(ncclResult_t result, const std::string& what, Deadline deadline,
                              const AbortFlag* abort_flag) {
  if (result == ncclSuccess) return;
  if (result != ncclInProgress) fail(result, what);
  poll([](ncclResult_t state) { return state == ncclSuccess ? Progress::Done : Progress::Pending; }, what, deadline,
       abort_flag);
}

void NcclComm::wait_for(const kernels::Event& done, const std::string& what, Deadline deadline,
                        const AbortFlag* abort_flag) {
  poll(
      [&](ncclResult_t) {
        try {
          return done.done() ? Progress::Done : Progress::Pending;
        } catch (const std::exception& e) {   // a CUDA error on the stream: the communicator is unusable too
          abort();
          throw Error(what + ": " + e.what() + " (" + describe() + ")");
        }
      },
      what, deadline, abort_flag);
}

void NcclComm::check_async(const std::string& what) {
  ncclResult_t state = ncclSuccess;
  const ncclResult_t got = ncclCommGetAsyncError(native(), &state);
  if (got != ncclSuccess) fail(got, what);
  if (state != ncclSuccess && state != ncclInProgress) fail(state, what);
}

void NcclComm::abort() noexcept {
  if (comm_ == nullptr) return;
  const ncclResult_t result = ncclCommAbort(comm_);
  comm_ = nullptr;
  if (result != ncclSuccess) PW_LOG(Warn, describe() << ": ncclCommAbort: " << ncclGetErrorString(result));
}

void NcclComm::release() noexcept {
  if (comm_ == nullptr) return;
  // Finalize flushes the enqueued work; it needs every rank, so a vanished peer ends in abort.
  ncclResult_t state = ncclCommFinalize(comm_);
  const auto deadline = Clock::now() + kFinalizeTimeout;
  Backoff backoff;
  while ((state == ncclSuccess || state == ncclInProgress) && Clock::now() < deadline) {
    if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) state = ncclInternalError;
    if (state != ncclInProgress) break;
    backoff.pause();
  }
  if (state == ncclSuccess) {
    const ncclResult_t destroyed = ncclCommDestroy(comm_);
    comm_ = nullptr;
    if (destroyed != ncclSuccess) PW_LOG(Warn, describe() << ": ncclCommDestroy: " << ncclGetErrorString(destroyed));
    return;
  }
  PW_LOG(Warn, describe() << ": finalizing did not complete (" << ncclGetErrorString(state) << "); aborting it");
  abort();
}

}  // namespace pw::rpc
