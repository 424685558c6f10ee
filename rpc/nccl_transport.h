#pragma once
// Transport over NCCL point-to-point, for ranks whose tensors live on CUDA devices.
//
// Every directed link src->dst has two channels, one for gradients and one for everything else, each
// with its own 2-rank communicator (src is its rank 0) and its own CUDA stream, created on the first
// send/recv over it (or by connect()) from an id the Store carries under "<prefix>/nccl/<src>-<dst>"
// (plus "/gradients"). So a send stuck waiting for its receiver never blocks the stream this rank
// receives on (the classic deadlock of two stages sending to each other on one stream), and
// activations and gradients between the same two ranks keep separate orders: a V schedule sends
// both kinds both ways at once, and each side takes them in its own program's order.
//
// A message is a fixed header (tag, dtype, shape) and then the payload, both sent with ncclSend.
// Each channel delivers in order: recv(peer, tag) must ask for the tags of a channel in the order peer sent them, and a
// mismatch is an Error (unlike the mailbox transports, NCCL cannot pick a later message first).
// send() returns once the message is enqueued on the link's stream (after the tensor's pending writes
// on the current stream); recv() waits for the header only, and the current stream waits for the
// payload. Received tensors are on this transport's device.
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "kernels/device.h"
#include "kernels/tensor.h"
#include "rpc/store.h"
#include "rpc/transport.h"

namespace pw::rpc {

// An NcclTransport; InputError for a CPU device, a device this machine lacks, or a build without
// CUDA/NCCL ("use the thrift transport").
std::unique_ptr<Transport> make_nccl_transport(int rank, int world_size, kernels::Device device, Store& store,
                                               std::string job_id_prefix);

#ifdef PW_WITH_CUDA
class AbortFlag;

class NcclTransport : public Transport {
 public:
  // InputError for bad rank/world size, a CPU device or a missing GPU. Creates no communicator yet.
  NcclTransport(int rank, int world_size, kernels::Device device, Store& store, std::string job_id_prefix);
  // Waits (bounded) for enqueued sends to finish, then frees the links; logs, never throws.
  ~NcclTransport() override;
  NcclTransport(const NcclTransport&) = delete;
  NcclTransport& operator=(const NcclTransport&) = delete;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  kernels::Device device() const { return device_; }

  // Opens both links with `peer` now (both ranks call it; with several peers, in ascending peer
  // order). Without it the first send on a link waits until the peer's first recv on that link.
  void connect(int peer, Deadline deadline);
  // `tensor` is copied to this transport's device first if it lives elsewhere. Waits only while the
  // link is being opened or while too many earlier sends on it are still unreceived.
  void send(int peer, const Tag& tag, const kernels::Tensor& tensor, Deadline deadline) override;
  kernels::Tensor recv(int peer, const Tag& tag, Deadline deadline) override;
  // This rank's pending and future calls throw AbortedError; its communicators are aborted (peers
  // are not told: their waits end at their deadlines or their own abort).
  void abort(const std::string& reason) override;

 private:
  struct Link;
  enum class Channel { Others, Gradients };
  static Channel channel_of(PayloadKind kind);
  // Who waits for a received payload: the device's current stream (recv) or the host (a dropped message).
  enum class Completion { CurrentStreamWaits, HostWaits };

  Link& link(int src, int dst, Channel channel);
  // Runs `fn` holding the link's lock, opening the link first; an exception marks the link unusable.
  template <typename Fn>
  auto on_link(Link& link, const std::string& what, Deadline deadline, Fn&& fn);
  void open(Link& link, const std::string& what, Deadline deadline);
  void enqueue_send(Link& link, const std::int64_t* header, const kernels::Tensor& payload, const std::string& what,
                    Deadline deadline);
  const std::int64_t* receive_header(Link& link, const std::string& what, Deadline deadline);
  void receive_payload(Link& link, const kernels::Tensor& into, Completion completion, const std::string& what,
                       Deadline deadline);
  void close(Link& link) noexcept;
  void check_peer(int peer) const;

  int rank_;
  int world_size_;
  kernels::Device device_;
  Store& store_;
  std::string prefix_;
  std::unique_ptr<AbortFlag> abort_;
  std::mutex links_mutex_;   // guards the map only; each Link has its own mutex
  std::map<std::tuple<int, int, Channel>, std::unique_ptr<Link>> links_;
};
#endif

}  // namespace pw::rpc
