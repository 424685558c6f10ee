#pragma once
// Averages one stage's gradients over its replicas, DDP-style: parameters are grouped into
// buckets of about `bucket_bytes` in backward order (last layers first); a bucket is
// all-reduced on a background thread as soon as all its gradients are final, while backward
// still runs for the layers before it. Buckets are reduced in the same order on every replica.
// Each parameter's gradient becomes a view into its bucket's flat buffer (as DDP's
// gradient_as_bucket_view), so a bucket is reduced in place with no packing copies.
#include <condition_variable>
#include <cstdint>
#include <exception>
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
                BucketOptions options, TraceTrack track = {});
  ~BucketReducer() override;
  BucketReducer(const BucketReducer&) = delete;
  BucketReducer& operator=(const BucketReducer&) = delete;

  void start_step(std::int64_t step) override;
  void ready(models::Parameter* parameter) override;
  void finish(rpc::Deadline deadline) override;
  // Cancels the collective too: a reducer (and its group) is unusable after an abort.
  void abort(const std::string& reason) override;

  std::size_t bucket_count() const;
  ReduceStats stats() const;

 private:
  struct Core;   // what the background thread uses
  std::shared_ptr<Core> core_;
  std::thread worker_;
};

}  // namespace pw::dp
