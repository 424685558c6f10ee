#include "rpc/nccl_transport.h"

#include <array>
#include <cstring>
#include <deque>
#include <optional>
#include <tuple>
#include <vector>

#include "core/clock.h"
#include "core/log.h"
#include "kernels/cuda_check.h"
#include "kernels/cuda_probe.h"
#include "kernels/stream.h"
#include "rpc/nccl_comm.h"

namespace pw::rpc {
namespace {

using kernels::Device;
using kernels::DType;
using kernels::Tensor;

// Header: int64 words, then the payload as a second ncclSend of raw bytes.
enum HeaderWord : int { kMagic, kStep, kMicroBatch, kKind, kVirtualStage, kDType, kNdim, kBytes, kDims };
constexpr int kMaxDims = 8;
constexpr int kHeaderWords = kDims + kMaxDims;
constexpr std::size_t kHeaderBytes = kHeaderWords * sizeof(std::int64_t);
using HeaderWords = std::array<std::int64_t, kHeaderWords>;
constexpr std::int64_t kMessageMagic = 0x70774e43434c0001;   // "pwNCCL", version 1
constexpr std::int64_t kHelloMagic = 0x70774e43434c4849;     // connect()'s greeting ("HI")

// Sends in flight on one link before send() waits for the oldest; also the sender's header slots.
constexpr int kMaxPendingSends = 128;
// How long the destructor lets enqueued sends finish before aborting them.
constexpr std::chrono::seconds kDrainTimeout{10};

// Page-locked host memory for headers: copies from/to pageable memory may wait for the whole
// stream, i.e. for the peer, which would make send() block.
class PinnedBuffer {
 public:
  explicit PinnedBuffer(std::size_t bytes) { PW_CUDA_CHECK(cudaMallocHost(&data_, bytes)); }
  ~PinnedBuffer() {
    const cudaError_t err = cudaFreeHost(data_);
    if (err != cudaSuccess) PW_LOG(Warn, "cudaFreeHost: " << cudaGetErrorString(err));
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  std::int64_t* words(int slot) const { return static_cast<std::int64_t*>(data_) + slot * kHeaderWords; }

 private:
  void* data_ = nullptr;
};

struct PendingSend {
  Tensor payload;   // keeps the storage alive until `done`
  kernels::Event done;
};

struct Header {
  std::int64_t magic = 0;
  Tag tag;
  DType dtype = DType::F32;
  kernels::Shape shape;
};

cudaStream_t native(const kernels::Stream& stream) { return static_cast<cudaStream_t>(stream.native()); }

HeaderWords encode(const Tag& tag, const Tensor& tensor) {
  HeaderWords h{};
  h[kMagic] = kMessageMagic;
  h[kStep] = tag.step;
  h[kMicroBatch] = tag.micro_batch;
  h[kKind] = static_cast<std::int64_t>(tag.kind);
  h[kVirtualStage] = tag.virtual_stage;
  h[kDType] = static_cast<std::int64_t>(tensor.dtype());
  h[kNdim] = tensor.ndim();
  h[kBytes] = static_cast<std::int64_t>(tensor.nbytes());
  for (int i = 0; i < tensor.ndim(); ++i) h[kDims + i] = tensor.dim(i);
  return h;
}

// Checks a received header word by word; a bad one means the link is out of step or corrupt.
Header decode(const std::int64_t* h, const std::string& what) {
  const auto corrupt = [&](const std::string& why) {
    return Error(what + ": the message header is corrupt (" + why + "); the NCCL link is out of step");
  };
  Header out;
  out.magic = h[kMagic];
  if (out.magic == kHelloMagic) return out;   // no tag, no payload
  if (out.magic != kMessageMagic) throw corrupt("bad magic " + std::to_string(out.magic));
  if (h[kKind] < 0 || h[kKind] > 255 || payload_kind_name(static_cast<PayloadKind>(h[kKind])) == "?")
    throw corrupt("payload kind " + std::to_string(h[kKind]));
  out.tag.step = h[kStep];
  out.tag.micro_batch = static_cast<int>(h[kMicroBatch]);
  out.tag.kind = static_cast<PayloadKind>(h[kKind]);
  out.tag.virtual_stage = static_cast<int>(h[kVirtualStage]);
  if (h[kNdim] < 0 || h[kNdim] > kMaxDims) throw corrupt(std::to_string(h[kNdim]) + " dimensions");
  for (int i = 0; i < h[kNdim]; ++i) {
    if (h[kDims + i] < 0) throw corrupt("negative dimension");
    out.shape.push_back(h[kDims + i]);
  }
  if (h[kDType] < 0 || h[kDType] > 255) throw corrupt("dtype code " + std::to_string(h[kDType]));
  out.dtype = static_cast<DType>(h[kDType]);
  std::size_t element = 0;
  try {
    element = kernels::dtype_size(out.dtype);
  } catch (const Error&) {
    throw corrupt("dtype code " + std::to_string(h[kDType]));
  }
  if (h[kBytes] != kernels::shape_numel(out.shape) * static_cast<std::int64_t>(element))
    throw corrupt(std::to_string(h[kBytes]) + " payload bytes for " + kernels::dtype_name(out.dtype) +
                  kernels::shape_str(out.shape));
  return out;
}

std::string message_str(const Header& h) {
  return h.magic == kHelloMagic ? std::string("connect()'s greeting") : tag_str(h.tag);
}

}  // namespace

struct NcclTransport::Link {
  Link(int s, int d, Channel c) : src(s), dst(d), channel(c) {}

  // Marks the link unusable (keeping the first reason) and stops its NCCL work.
  void fail(const std::string& why) noexcept {
    if (failure.empty()) failure = why.empty() ? std::string("unknown error") : why;
    if (comm) comm->abort();
  }

  const int src;
  const int dst;
  const Channel channel;
  std::mutex mutex;      // one call at a time per link
  std::string failure;   // non-empty once unusable
  std::optional<kernels::Stream> stream;
  std::optional<PinnedBuffer> host_headers;   // kMaxPendingSends slots when sending, 1 when receiving
  Tensor device_headers;                      // the same slots on the device
  int next_slot = 0;
  std::deque<PendingSend> pending;   // oldest first; they complete in stream order
  std::optional<NcclComm> comm;
};

NcclTransport::NcclTransport(int rank, int world_size, Device device, Store& store, std::string job_id_prefix)
    : rank_(rank), world_size_(world_size), device_(device), store_(store), prefix_(std::move(job_id_prefix)),
      abort_(std::make_unique<AbortFlag>()) {
  PW_INPUT_CHECK(world_size >= 1 && rank >= 0 && rank < world_size,
                 "NCCL transport: rank " << rank << " is outside a world of " << world_size << " ranks");
  PW_INPUT_CHECK(device.is_cuda(), "the NCCL transport needs a CUDA device, but rank "
                                       << rank << " runs on " << device.str()
                                       << "; use the thrift transport for CPU ranks");
  const int count = kernels::cuda_device_count();
  PW_INPUT_CHECK(device.index >= 0 && device.index < count,
                 "rank " << rank << " asks for " << device.str() << " but this machine has " << count
                         << " CUDA device(s); pick cuda:0..cuda:" << count - 1
                         << " or use the thrift transport");
  PW_INPUT_CHECK(!prefix_.empty(), "the NCCL transport needs a non-empty job id prefix for its store keys");
}

NcclTransport::~NcclTransport() {
  for (auto& entry : links_) close(*entry.second);
}

void NcclTransport::check_peer(int peer) const {
  PW_CHECK(peer >= 0 && peer < world_size_ && peer != rank_,
           "rank " << rank_ << " cannot talk to rank " << peer << " over NCCL (world of " << world_size_
                   << " ranks; there are no links to oneself)");
}

NcclTransport::Channel NcclTransport::channel_of(PayloadKind kind) {
  return kind == PayloadKind::Gradient ? Channel::Gradients : Channel::Others;
}

NcclTransport::Link& NcclTransport::link(int src, int dst, Channel channel) {
  std::lock_guard lock(links_mutex_);
  auto& slot = links_[{src, dst, channel}];
  if (!slot) slot = std::make_unique<Link>(src, dst, channel);
  return *slot;
}

template <typename Fn>
auto NcclTransport::on_link(Link& link, const std::string& what, Deadline deadline, Fn&& fn) {
  std::lock_guard lock(link.mutex);
  if (abort_->raised()) {
    link.fail("aborted: " + abort_->reason());
    throw AbortedError(what + " was aborted: " + abort_->reason());
  }
  if (!link.failure.empty())
    throw Error(what + ": NCCL link " + std::to_string(link.src) + "->" + std::to_string(link.dst) +
                " is unusable after an earlier error: " + link.failure);
  kernels::CudaDeviceGuard guard(device_.index);
  try {
    if (!link.comm) open(link, what, deadline);
    return fn();
  } catch (const std::exception& e) {
    link.fail(e.what());
    throw;
  }
}

void NcclTransport::open(Link& link, const std::string& what, Deadline deadline) {
  const bool root = link.src == rank_;
  const int peer = root ? link.dst : link.src;
  const std::string gradients = link.channel == Channel::Gradients ? "/gradients" : "";
  const std::string name = std::to_string(link.src) + "->" + std::to_string(link.dst) + gradients;
  try {
    const std::string id = nccl_unique_id_for(store_, prefix_ + "/nccl/" + std::to_string(link.src) + "-" +
                                                          std::to_string(link.dst) + gradients,
                                              root, deadline, abort_.get());
    link.comm.emplace(id, root ? 0 : 1, 2, device_, "link " + name + " of job " + prefix_, deadline, abort_.get());
  } catch (const TimeoutError& e) {
    throw TimeoutError(what + ": rank " + std::to_string(peer) + " did not open NCCL link " + name +
                       " before the deadline (" + e.what() + ")");
  } catch (const AbortedError&) {
    throw AbortedError(what + " was aborted while opening NCCL link " + name + ": " + abort_->reason());
  }
  link.stream.emplace(device_);
  const int slots = root ? kMaxPendingSends : 1;
  link.host_headers.emplace(static_cast<std::size_t>(slots) * kHeaderBytes);
  link.device_headers = Tensor::empty({std::int64_t{slots} * kHeaderWords}, DType::I64, device_);
  // The caching allocator is not stream-aware: the block may have been freed by work still queued on
  // the current stream. The link stream, which writes it from now on, starts after that work.
  kernels::Event allocated(device_);
  allocated.record(kernels::current_stream(device_));
  allocated.wait_on(*link.stream);
}

void NcclTransport::enqueue_send(Link& link, const std::int64_t* header, const Tensor& payload,
                                 const std::string& what, Deadline deadline) {
  NcclComm& comm = *link.comm;
  while (!link.pending.empty() && link.pending.front().done.done()) link.pending.pop_front();
  if (link.pending.size() >= static_cast<std::size_t>(kMaxPendingSends)) {
    comm.wait_for(link.pending.front().done,
                  what + " (" + std::to_string(kMaxPendingSends) + " earlier messages are still unreceived)",
                  deadline, abort_.get());
    link.pending.pop_front();
  }
  comm.check_async(what);   // an earlier send's failure shows up here
  // At most kMaxPendingSends - 1 sends are pending, so the previous user of this slot has finished.
  const int slot = link.next_slot;
  link.next_slot = (slot + 1) % kMaxPendingSends;
  std::int64_t* host = link.host_headers->words(slot);
  std::int64_t* dev = link.device_headers.data<std::int64_t>() + std::int64_t{slot} * kHeaderWords;
  std::memcpy(host, header, kHeaderBytes);

  const cudaStream_t stream = native(*link.stream);
  kernels::Event ready(device_);   // the payload's producer ran on the current stream
  ready.record(kernels::current_stream(device_));
  ready.wait_on(*link.stream);
  PW_CUDA_CHECK(cudaMemcpyAsync(dev, host, kHeaderBytes, cudaMemcpyHostToDevice, stream));
  comm.check_enqueued(ncclSend(dev, kHeaderBytes, ncclUint8, 1, comm.native(), stream), what, deadline,
                      abort_.get());
  const auto bytes = static_cast<std::size_t>(header[kBytes]);
  if (bytes > 0)
    comm.check_enqueued(ncclSend(payload.raw(), bytes, ncclUint8, 1, comm.native(), stream), what, deadline,
                        abort_.get());
  kernels::Event done(device_);
  done.record(*link.stream);
  link.pending.push_back({payload, std::move(done)});
}

const std::int64_t* NcclTransport::receive_header(Link& link, const std::string& what, Deadline deadline) {
  NcclComm& comm = *link.comm;
  const cudaStream_t stream = native(*link.stream);
  std::int64_t* dev = link.device_headers.data<std::int64_t>();
  std::int64_t* host = link.host_headers->words(0);
  comm.check_enqueued(ncclRecv(dev, kHeaderBytes, ncclUint8, 0, comm.native(), stream), what, deadline,
                      abort_.get());
  PW_CUDA_CHECK(cudaMemcpyAsync(host, dev, kHeaderBytes, cudaMemcpyDeviceToHost, stream));
  kernels::Event arrived(device_);
  arrived.record(*link.stream);
  comm.wait_for(arrived, what, deadline, abort_.get());
  return host;
}

void NcclTransport::receive_payload(Link& link, const Tensor& into, Completion completion, const std::string& what,
                                    Deadline deadline) {
  if (into.nbytes() == 0) return;
  NcclComm& comm = *link.comm;
  kernels::Stream& current = kernels::current_stream(device_);
  // `into` is fresh from the caching allocator: work queued on the current stream may still use its block.
  kernels::Event ready(device_);
  ready.record(current);
  ready.wait_on(*link.stream);
  comm.check_enqueued(ncclRecv(into.raw(), into.nbytes(), ncclUint8, 0, comm.native(), native(*link.stream)), what,
                      deadline, abort_.get());
  kernels::Event done(device_);
  done.record(*link.stream);
  if (completion == Completion::HostWaits) comm.wait_for(done, what, deadline, abort_.get());
  else done.wait_on(current);
}

void NcclTransport::connect(int peer, Deadline deadline) {
  check_peer(peer);
  // Both ranks open the lower rank's outgoing link first, so their calls pair up in the same order.
  const int low = std::min(rank_, peer);
  const int high = std::max(rank_, peer);
  for (const auto& [src, dst, channel] :
       {std::tuple{low, high, Channel::Others}, std::tuple{high, low, Channel::Others},
        std::tuple{low, high, Channel::Gradients}, std::tuple{high, low, Channel::Gradients}}) {
    Link& l = link(src, dst, channel);
    if (src == rank_) {
      const std::string what =
          "rank " + std::to_string(rank_) + " greeting rank " + std::to_string(peer) + " (connect)";
      HeaderWords hello{};
      hello[kMagic] = kHelloMagic;
      on_link(l, what, deadline, [&] { enqueue_send(l, hello.data(), Tensor(), what, deadline); });
    } else {
      const std::string what = "rank " + std::to_string(rank_) + " waiting for rank " + std::to_string(peer) +
                               "'s greeting (connect)";
      on_link(l, what, deadline, [&] {
        const Header got = decode(receive_header(l, what, deadline), what);
        PW_CHECK(got.magic == kHelloMagic, what << ": the next message on the link is " << message_str(got)
                                                << "; both ranks must call connect() before sending");
      });
    }
  }
}

void NcclTransport::send(int peer, const Tag& tag, const Tensor& tensor, Deadline deadline) {
  check_peer(peer);
  const std::string what = "rank " + std::to_string(rank_) + " sending " + tag_str(tag) + " to rank " +
                           std::to_string(peer);
  PW_CHECK(tensor.defined(), what << ": the tensor is undefined");
  PW_CHECK(tensor.ndim() <= kMaxDims, what << ": " << tensor.describe() << " has more than " << kMaxDims
                                           << " dimensions");
  // NCCL reads the payload on this rank's device (Tensor::to waits for a copy from elsewhere).
  const Tensor payload = tensor.device() == device_ ? tensor : tensor.to(device_);
  const HeaderWords header = encode(tag, payload);
  Link& l = link(rank_, peer, channel_of(tag.kind));
  on_link(l, what, deadline, [&] { enqueue_send(l, header.data(), payload, what, deadline); });
}

Tensor NcclTransport::recv(int peer, const Tag& tag, Deadline deadline) {
  check_peer(peer);
  const std::string what = "rank " + std::to_string(rank_) + " receiving " + tag_str(tag) + " from rank " +
                           std::to_string(peer);
  struct Received {
    Tensor tensor;
    std::string mismatch;
  };
  Link& l = link(peer, rank_, channel_of(tag.kind));
  Received got = on_link(l, what, deadline, [&] {
    const Header header = decode(receive_header(l, what, deadline), what);
    const bool is_message = header.magic == kMessageMagic;
    if (is_message && header.tag == tag) {
      Received r{Tensor::empty(header.shape, header.dtype, device_), {}};
      receive_payload(l, r.tensor, Completion::CurrentStreamWaits, what, deadline);
      return r;
    }
    // Take the unexpected message off the link, so the link stays in step and its sender is not stuck.
    if (is_message)
      receive_payload(l, Tensor::empty(header.shape, header.dtype, device_), Completion::HostWaits, what, deadline);
    return Received{Tensor(), "rank " + std::to_string(rank_) + " expected " + tag_str(tag) + " from rank " +
                                  std::to_string(peer) + " but the next message on the link is " +
                                  message_str(header) + "; NCCL links need sends and receives in the same order"};
  });
  if (!got.mismatch.empty()) throw Error(got.mismatch);
  return std::move(got.tensor);
}

void NcclTransport::abort(const std::string& reason) {
  abort_->raise(reason);
  std::vector<Link*> all;
  {
    std::lock_guard lock(links_mutex_);
    for (auto& entry : links_) all.push_back(entry.second.get());
  }
  for (Link* l : all) {
    // A busy link belongs to a waiting call, which sees the flag within a millisecond and aborts it.
    std::unique_lock lock(l->mutex, std::try_to_lock);
    if (lock.owns_lock()) l->fail("aborted: " + reason);
  }
}

void NcclTransport::close(Link& link) noexcept {
  std::lock_guard lock(link.mutex);
  try {
    kernels::CudaDeviceGuard guard(device_.index);
    if (abort_->raised()) link.fail("aborted: " + abort_->reason());
    if (link.comm && !link.comm->aborted() && !link.pending.empty()) {
      try {
        link.comm->wait_for(link.pending.back().done,
                            "rank " + std::to_string(rank_) + " finishing its sends to rank " +
                                std::to_string(link.dst) + " at shutdown",
                            Clock::now() + kDrainTimeout);
      } catch (const std::exception& e) {
        PW_LOG(Warn, e.what() << "; the unreceived sends were aborted");
      }
    }
    // After an abort NCCL's kernels have stopped; the stream drains before the payloads are freed.
    if (!link.pending.empty() && link.stream) link.stream->synchronize();
  } catch (const std::exception& e) {
    PW_LOG(Warn, "closing NCCL link " << link.src << "->" << link.dst << ": " << e.what());
  }
  link.pending.clear();
  link.comm.reset();
}

std::unique_ptr<Transport> make_nccl_transport(int rank, int world_size, Device device, Store& store,
                                               std::string job_id_prefix) {
  return std::make_unique<NcclTransport>(rank, world_size, device, store, std::move(job_id_prefix));
}

}  // namespace pw::rpc
