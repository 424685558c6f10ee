#pragma once
// An NCCL communicator in non-blocking mode (RAII) and the deadline-bounded waits around it.
// Nothing here blocks inside NCCL or CUDA: every wait polls the communicator's state and a CUDA
// event, so a peer that never shows up ends in TimeoutError / AbortedError, not a hang.
// Used by the NCCL transport (one 2-rank communicator per directed link) and by gradient all-reduce.
// CUDA builds only.
#ifdef PW_WITH_CUDA
#include <nccl.h>

#include <atomic>
#include <mutex>
#include <string>

#include "kernels/device.h"
#include "kernels/stream.h"
#include "rpc/store.h"
#include "rpc/transport.h"

namespace pw::rpc {

// Raised once, from any thread; every wait given the flag then aborts its communicator and throws
// AbortedError with the reason.
class AbortFlag {
 public:
  void raise(const std::string& reason);   // the first reason is kept
  bool raised() const noexcept { return raised_.load(std::memory_order_acquire); }
  std::string reason() const;

 private:
  std::atomic<bool> raised_{false};
  mutable std::mutex mutex_;
  std::string reason_;
};

// The bytes of the ncclUniqueId for `key`: the root makes one (ncclGetUniqueId) and publishes it with
// store.set(key); every other rank waits for it with store.get (TimeoutError at the deadline,
// AbortedError once `abort_flag` is raised).
std::string nccl_unique_id_for(Store& store, const std::string& key, bool is_root, Deadline deadline,
                               const AbortFlag* abort_flag = nullptr);

class NcclComm {
 public:
  // Joins the `size`-rank communicator `unique_id` (from nccl_unique_id_for) as `rank` on `device`
  // and polls until every rank has joined. `name` names the group in errors. On the deadline: aborts
  // and throws TimeoutError naming the group, the rank and what it waited for.
  NcclComm(const std::string& unique_id, int rank, int size, kernels::Device device, std::string name,
           Deadline deadline, const AbortFlag* abort_flag = nullptr);
  // Finalizes and destroys (bounded wait); aborts instead after an error. Logs, never throws.
  ~NcclComm();
  NcclComm(NcclComm&& other) noexcept;
  NcclComm& operator=(NcclComm&& other) noexcept;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  ncclComm_t native() const;   // Error once aborted
  int rank() const { return rank_; }
  int size() const { return size_; }
  kernels::Device device() const { return device_; }
  const std::string& name() const { return name_; }
  bool aborted() const { return comm_ == nullptr; }

  // `result` is what an NCCL call on this communicator returned (or the ncclGroupEnd of a group whose
  // calls all use it). Returns once the work is enqueued on its stream: ncclInProgress is polled
  // until then. Errors abort the communicator and throw, starting the message with `what`.
  void check_enqueued(ncclResult_t result, const std::string& what, Deadline deadline,
                      const AbortFlag* abort_flag = nullptr);
  // Polls until `done` (recorded on the stream after the enqueued work) has completed. On the
  // deadline, a raised `abort_flag` or an asynchronous NCCL error: aborts the communicator and throws
  // TimeoutError / AbortedError / Error, starting the message with `what` (say who waits for whom).
  void wait_for(const kernels::Event& done, const std::string& what, Deadline deadline,
                const AbortFlag* abort_flag = nullptr);
  // Throws (after aborting) if the communicator has reported an asynchronous error.
  void check_async(const std::string& what);
  // Stops this communicator's work on the device and frees it. Not safe concurrently with other calls
  // on the same NcclComm: to stop a wait from another thread, raise its AbortFlag.
  void abort() noexcept;

 private:
  enum class Progress { Pending, Done };
  template <typename Step>
  void poll(Step step, const std::string& what, Deadline deadline, const AbortFlag* abort_flag);
  [[noreturn]] void fail(ncclResult_t result, const std::string& what);
  std::string describe() const;   // "NCCL communicator 'link 0->1', rank 1 of 2 on cuda:1"
  void release() noexcept;

  ncclComm_t comm_ = nullptr;
  int rank_ = 0;
  int size_ = 0;
  kernels::Device device_;
  std::string name_;
};

}  // namespace pw::rpc
#endif
