#pragma once
// Averages one stage's gradients over its replicas, DDP-style: parameters are grouped into
// buckets of about `bucket_bytes` in backward order (last layers first); a bucket is
// all-reduced on a background thread as soon as all its gradients are final, while backward
// still runs for the layers before it. Buckets are reduced in the same order on every replica.
// Each parameter's gradient becomes a view into its bucket's flat buffer (as DDP's
// gradient_as_bucket_view), so a bucket is reduced in place with no packing copies.
//
// Sharded optimizer state (ZeRO stage 1, Megatron's distributed optimizer): every bucket is cut
// into R equal segments (padded to a multiple of R aligned pieces) and replica r owns segment r
// of each. A bucket is reduce-scattered instead of all-reduced, so replica r holds the mean
// gradient of its segments only; it updates the parameter slices that lie there (UpdateShare)
// and the weights are all-gathered afterwards. For that the weights, too, live in a flat buffer
// per bucket laid out as its gradients. The all-gathers run on the background thread too, bucket
// by bucket in the order forward uses them (the reverse of the reduction order), while the next
// step starts: each layer's forward waits for its own buckets only (await_weights), and the
// next step's reductions follow the last gather, in the same order on every replica. Under mixed precision a weight with a
// 16-bit compute copy (models::Layer::set_precision) keeps only that copy whole, in a bucket of
// 16-bit weights: its fp32 master exists for this replica's segment only (ParameterSlice::master),
// the optimizer rounds the updated master into the 16-bit weights, and those are all-gathered
// (half the bytes of fp32). Parameters named `tied` (tied weights, whose gradients are summed
// over the stages holding them after the reduction) each get a bucket of their own: laid out
// alike on every stage holding the weight, so replica r of each holder owns the same elements, and
// the stages sum those segments only.
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "dataparallel/collective.h"
#include "pipeline/gradient_sync.h"

namespace pw::dp {

struct BucketOptions {
  std::size_t bucket_bytes = std::size_t{25} << 20;
  Compression compression = Compression::None;
  OptimizerState optimizer_state = OptimizerState::Replicated;
  // Sharded under mixed precision, Host: each replica's fp32 master segments are host memory
  // outside the device's cap (--offload-optimizer, whose host update writes them).
  models::OptimizerOffload masters = models::OptimizerOffload::None;
};

struct ReduceStats {
  std::int64_t buckets = 0;
  std::int64_t bytes = 0;            // F32 gradient bytes reduced per step
  double reduce_seconds = 0.0;       // last step: time the background thread spent in collectives
  double exposed_seconds = 0.0;      // last step: time finish() waited (what backward did not hide)
};

// Whose all-reduce spans the reducer's thread records (lane 1 of that rank in a trace).
struct TraceTrack {
  int stage = 0;
  int replica = 0;
};

class BucketReducer : public pipeline::GradientSync {
 public:
  // `parameters` in model (forward) order, all on one device. The collective is shared with the
  // background thread: after an abort the thread may still sit in a collective the dead replica
  // never joins, and is then left to finish on its own instead of holding up the caller.
  BucketReducer(std::vector<models::Parameter*> parameters, std::shared_ptr<Collective> collective,
                BucketOptions options, TraceTrack track = {}, std::vector<models::Parameter*> tied = {});
  ~BucketReducer() override;
  BucketReducer(const BucketReducer&) = delete;
  BucketReducer& operator=(const BucketReducer&) = delete;

  void start_step(std::int64_t step) override;
  void ready(models::Parameter* parameter) override;
  void finish(rpc::Deadline deadline) override;
  // Cancels the collective too: a reducer (and its group) is unusable after an abort.
  void abort(const std::string& reason) override;

  std::optional<pipeline::UpdateShare> update_share() const override;
  void start_gathering_weights() override;
  void await_weights(models::Layer& layer, const std::string& name, rpc::Deadline deadline) override;
  void await_all_weights(rpc::Deadline deadline) override;
  // Sharded state: `buffers` (batch-norm running statistics) follow replica 0's, broadcast on the
  // background thread ahead of each weight gather; a layer holding any waits for them as for its
  // weights. (Unsharded, the caller broadcasts them itself between steps.) Set before the first step.
  void follow_replica_zero(std::vector<models::Buffer*> buffers);

  // Sharded state made whole: every replica calls it at once, between steps, with its own
  // `slice_state(p)`: its state tensor for its slice of sharded parameter `p` (undefined where it
  // owns none of p). Returns every sharded parameter's whole tensor, shaped as the parameter, in
  // host memory held for the device outside its cap: a bucket at a time is gathered, on a CPU
  // device in host memory itself, on a GPU through a device buffer of at most kGatherChunkBytes
  // (the collective's own), so the device needs no room for a bucket's state.
  std::map<models::Parameter*, kernels::Tensor> gather_sharded(
      const std::function<kernels::Tensor(models::Parameter*)>& slice_state);
  // The fp32 master weights made whole (mixed precision; every replica calls it at once, between
  // steps): each parameter kept as 16-bit weights with sharded masters, shaped as the parameter,
  // in host memory as gather_sharded's.
  std::map<models::Parameter*, kernels::Tensor> gather_masters();

  static constexpr std::int64_t kGatherChunkBytes = std::int64_t{4} << 20;

  std::size_t bucket_count() const;
  ReduceStats stats() const;

 private:
  struct Core;   // what the background thread uses
  std::shared_ptr<Core> core_;
  std::thread worker_;
};

}  // namespace pw::dp
