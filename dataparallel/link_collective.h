#pragma once
// Collectives for CPU tensors over the job's own links (an rpc::Transport: in-process between
// threads, Thrift between processes, where every frame carries the job token and is refused
// without it). Gloo's TCP pairs carry no token and Debian's Gloo has no TLS, so a job whose
// ranks span hosts reduces over these links instead (dataparallel/cpu_collectives.h).
//
// all-reduce: a ring, reduce-scatter then all-gather. The buffer is cut into one segment per
// member and each segment into chunks (dataparallel/ring_layout.h), one message per chunk, so a
// large bucket streams through the ring instead of waiting for whole segments. Each segment is
// summed in ring order starting after its owner, the same order on every run and in every world
// (threads or processes), so the result bits are reproducible; they differ from Gloo's, which
// sums in another order. With fp16/bf16 compression the values travel and are summed in that
// format, each sum through float and rounded to nearest even, as GlooCollective does.
// broadcast: a chunked chain from the root around the ring.
// reduce_scatter_sum and all_gather: the all-reduce's two halves alone, its ring turned back by one
// segment so that member r ends with (or starts from) segment r; all_gather moves bytes, any dtype.
//
// Messages are rpc::PayloadKind::Collective tags: step = the group's operation number,
// micro_batch = the message within it, virtual_stage = the group's id (a hash of its name), so
// two groups on the same ranks (gradients, sync batch-norm) and pipeline traffic never mix.
// Every wait ends after `timeout` with an error naming the group, this member, the peer, the
// operation and the chunk.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "dataparallel/collective.h"
#include "rpc/subgroup_transport.h"

namespace pw::dp {

struct LinkCollectiveOptions {
  std::int64_t chunk_bytes = std::int64_t{1} << 20;   // the largest message of an operation
};

class LinkCollective : public Collective {
 public:
  // `world`: the job's transport, which must outlive every operation (cancel() waits for one in
  // flight to leave it). `members`: world ranks in group order, this rank among them. `name`:
  // the same on every member ("dp/stage0/"), unique among the job's groups.
  LinkCollective(rpc::Transport& world, std::vector<int> members, std::string name, std::chrono::milliseconds timeout,
                 LinkCollectiveOptions options = {});

  // The id in the tags of the group called `name`: 31 bits of its FNV-1a hash.
  static int group_id(std::string_view name);

  int rank() const override { return group_.rank(); }
  int size() const override { return group_.world_size(); }
  void allreduce_sum(kernels::Tensor& data, Compression compression) override;
  void broadcast(kernels::Tensor& data, int root) override;
  void reduce_scatter_sum(kernels::Tensor& data, Compression compression) override;
  void all_gather(kernels::Tensor& data) override;
  // Makes a wait in progress end within a few milliseconds, and every later call fail at once,
  // with AbortedError; returns once no call of this collective is inside the transport (or after
  // a second, should a send stay blocked on a peer: the job's transport abort ends those).
  void cancel() noexcept override;

  std::int64_t chunk_bytes() const { return options_.chunk_bytes; }

 private:
  // What a message is, for errors: "all-reduce 4 (reduce-scatter step 1, chunk 2)".
  struct Piece {
    std::int64_t operation = 0;
    const char* what = "";    // "all-reduce", "broadcast"
    const char* phase = "";   // "reduce-scatter", "all-gather", "" for broadcast
    int step = 0;
    int chunk = 0;
    int message = 0;          // the tag's micro_batch
  };

  class InTransport;   // counts calls inside the transport, refuses new ones after cancel()
  // Which halves of the ring an operation runs, and which segment each member holds: with
  // `shift` 0 (all-reduce) member r ends the reduce-scatter with segment r+1; with -1, segment r.
  struct RingPlan {
    const char* what = "all-reduce";
    bool reduce = true;
    bool gather = true;
    int shift = 0;
  };
  // Sums and/or gathers `values` over the group in place, in the element format `Format` (.cpp).
  template <typename Format>
  void ring(typename Format::Value* values, std::int64_t elements, std::int64_t operation, RingPlan plan);
  // Packs `data` into `Format` (16-bit compression), runs the ring, unpacks.
  void compressed_ring(kernels::Tensor& data, Compression compression, std::int64_t operation, RingPlan plan);
  // `tensor` is the peer's from now on: the caller never writes to it again.
  void send_piece(int peer, const Piece& piece, const kernels::Tensor& tensor);
  kernels::Tensor recv_piece(int peer, const Piece& piece, std::int64_t elements, kernels::DType dtype);
  rpc::Tag tag(const Piece& piece) const;
  std::string where(const Piece& piece, int peer) const;
  [[noreturn]] void rethrow_with(const std::string& context) const;

  rpc::SubgroupTransport group_;
  std::vector<int> members_;
  std::string name_;
  int id_;
  std::chrono::milliseconds timeout_;
  LinkCollectiveOptions options_;
  std::atomic<std::int64_t> next_operation_{0};

  std::mutex mutex_;
  std::condition_variable left_transport_;
  bool cancelled_ = false;
  int in_transport_ = 0;
};

}  // namespace pw::dp
