#include "dataparallel/nccl_collective.h"

#include "core/error.h"

#ifdef PW_WITH_CUDA
#include "kernels/cuda_check.h"
#include "kernels/stream.h"
#include "rpc/nccl_comm.h"
#endif

namespace pw::dp {

#ifdef PW_WITH_CUDA
namespace {

class NcclCollective : public Collective {
 public:
  NcclCollective(int rank, int size, kernels::Device device, rpc::Store& store, const std::string& key,
                 std::chrono::milliseconds timeout)
      : device_(device), timeout_(timeout),
        comm_(rpc::nccl_unique_id_for(store, key, rank == 0, deadline(), &abort_), rank, size, device, key,
              deadline(), &abort_) {}

  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }

  void allreduce_sum(kernels::Tensor& data, Compression compression) override {
    check(data, "all-reduce");
    PW_INPUT_CHECK(compression == Compression::None,
                   "16-bit gradient compression runs on the CPU (Gloo) path only; turn gradient compression off on GPUs");
    PW_CHECK(data.dtype() == kernels::DType::F32, "all-reduce of " << data.describe() << "; expected F32");
    run("all-reduce", [&](cudaStream_t stream) {
      return ncclAllReduce(data.raw(), data.raw(), static_cast<std::size_t>(data.numel()), ncclFloat, ncclSum,
                           comm_.native(), stream);
    });
  }

  // In place: this member's segment of `data` is NCCL's receive buffer.
  void reduce_scatter_sum(kernels::Tensor& data, Compression compression) override {
    check(data, "reduce-scatter");
    PW_INPUT_CHECK(compression == Compression::None,
                   "16-bit gradient compression runs on the CPU (Gloo) path only; turn gradient compression off on GPUs");
    PW_CHECK(data.dtype() == kernels::DType::F32, "reduce-scatter of " << data.describe() << "; expected F32");
    PW_CHECK(data.numel() % size() == 0, "reduce-scatter of " << data.numel() << " elements over " << size()
                                                              << " members: not a multiple");
    const auto segment = static_cast<std::size_t>(data.numel() / size());
    float* mine = static_cast<float*>(data.raw()) + segment * static_cast<std::size_t>(rank());
    run("reduce-scatter", [&](cudaStream_t stream) {
      return ncclReduceScatter(data.raw(), mine, segment, ncclFloat, ncclSum, comm_.native(), stream);
    });
  }

  void all_gather(kernels::Tensor& data) override {
    check(data, "all-gather");
    PW_CHECK(data.numel() % size() == 0, "all-gather of " << data.numel() << " elements over " << size()
                                                          << " members: not a multiple");
    const std::size_t segment = data.nbytes() / static_cast<std::size_t>(size());
    const auto* mine = static_cast<const std::uint8_t*>(data.raw()) + segment * static_cast<std::size_t>(rank());
    run("all-gather", [&](cudaStream_t stream) {
      return ncclAllGather(mine, data.raw(), segment, ncclUint8, comm_.native(), stream);
    });
  }

  // NCCL forbids aborting a communicator from another thread while a call on it runs: raise the flag
  // that the waiting thread polls, and it aborts the communicator itself.
  void cancel() noexcept override { abort_.raise("another replica of the group failed"); }

  void broadcast(kernels::Tensor& data, int root) override {
    check(data, "broadcast");
    run("broadcast", [&](cudaStream_t stream) {
      return ncclBroadcast(data.raw(), data.raw(), data.nbytes(), ncclUint8, root, comm_.native(), stream);
    });
  }

 private:
  rpc::Deadline deadline() const { return std::chrono::steady_clock::now() + timeout_; }

  void check(const kernels::Tensor& data, const char* what) const {
    PW_CHECK(data.device() == device_, what << " of " << data.describe() << " on a communicator of " << device_.str());
  }

  // Enqueues on this communicator's own stream, after what the calling thread's current stream has
  // queued (the gradients), and waits on the host with a deadline, so whatever is queued later
  // (on any stream) reads the result.
  // Two communicators of one device never share a stream: with a shared one, two threads could
  // queue their collectives in different orders on different replicas, and each replica's stream
  // would wait inside another communicator's kernel for ever.
  template <typename Enqueue>
  void run(const char* what, Enqueue enqueue) {
    kernels::CudaDeviceGuard guard(device_.index);
    auto& current = kernels::current_stream(device_);
    const auto until = deadline();
    if (abort_.raised()) throw rpc::AbortedError(std::string(what) + " was cancelled: " + abort_.reason());
    kernels::Event ready(device_);
    ready.record(current);
    ready.wait_on(stream_);
    comm_.check_enqueued(enqueue(static_cast<cudaStream_t>(stream_.native())), what, until, &abort_);
    kernels::Event done(device_);
    done.record(stream_);
    comm_.wait_for(done, what, until, &abort_);
  }

  kernels::Device device_;
  std::chrono::milliseconds timeout_;
  kernels::Stream stream_{device_};   // outlives comm_, whose destructor may still drain work on it
  rpc::AbortFlag abort_;   // declared before comm_: the constructor's waits poll it
  rpc::NcclComm comm_;
};

}  // namespace

std::unique_ptr<Collective> make_nccl_collective(int rank, int size, kernels::Device device, rpc::Store& store,
                                                 const std::string& key, std::chrono::milliseconds timeout) {
  PW_INPUT_CHECK(device.is_cuda(), "an NCCL all-reduce needs a CUDA device, got " << device.str());
  return std::make_unique<NcclCollective>(rank, size, device, store, key, timeout);
}

#else

std::unique_ptr<Collective> make_nccl_collective(int, int, kernels::Device device, rpc::Store&, const std::string&,
                                                 std::chrono::milliseconds) {
  throw InputError("replicas on " + device.str() + " need NCCL, and this build has no CUDA; use cpu devices");
}

#endif

}  // namespace pw::dp
