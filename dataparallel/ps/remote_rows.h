#pragma once
// A layer whose rows live on the parameter servers (PsEmbeddingBag): what a training step asks of
// it beside forward and backward. Such layers register with their stage's RemoteRowsRegistry
// (remote_rows_registry.h) when they are built, and the stage executor drives them through it;
// models::Layer knows nothing of servers.
#include <cstdint>
#include <vector>

#include "kernels/tensor.h"
#include "pipeline/remote_rows_sync.h"

namespace pw::dp {

using pipeline::RemoteGradients;

// A layer's gradients waiting to be pushed, as they would be pushed: `keys` ascending, `rows`
// keys.size() x the table's row width.
struct PendingRows {
  std::vector<std::int64_t> keys;
  std::vector<float> rows;
};

class RemoteRows {
 public:
  virtual ~RemoteRows() = default;

  // Which worker of the servers this copy of the layer is (its replica); set before the first
  // forward. Default 0.
  virtual void set_worker(int worker) = 0;
  // The sum of squares of the gradients waiting to be pushed (0 with none), and a scale applied
  // to them: remote rows count in the step's finiteness check and in clipping.
  virtual double gradient_sum_of_squares() const = 0;
  virtual void scale_gradients(double factor) = 0;
  // The same gradients by key (for the norm of their sum over the replicas).
  virtual PendingRows pending_rows() const = 0;
  // Once per optimizer step, after the local update: the gradients this step accumulated leave
  // for the servers as `worker`'s pushes (each replica of a stage is one worker). Discard (a
  // skipped step) sends none of them, but the step still counts as the worker's.
  virtual void push_gradients(int worker, RemoteGradients what) = 0;
  // This layer's own inputs for the next step's micro-batches, given while the current step
  // still runs: the rows they will look up start coming.
  virtual void prefetch(const std::vector<kernels::Tensor>& next_micro_batches) = 0;
  // Returns once every push sent has been answered (pushes leave in the background); a push's
  // error surfaces here or at the next push.
  virtual void flush() = 0;
  // After the servers were restored from a checkpoint, or a job of threads recovered from a failed
  // step: forget the step this layer was at (and any abort) and read it from the servers again.
  virtual void reconnect() = 0;
  // From any thread, when the job failed elsewhere: calls to the servers under way fail at once
  // (AbortedError naming `why`) rather than wait for workers that are gone, and so do later ones
  // until reconnect().
  virtual void abort(const std::string& why) noexcept { (void)why; }
};

}  // namespace pw::dp
