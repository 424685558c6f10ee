#pragma once
// How a stage's gradients are combined with its replicas' (data parallelism). The executor tells
// it when each parameter's gradient for the step is final (during the last backward that adds to
// it, layer by layer) and waits for the result before the optimizer step; the implementation
// (dataparallel::BucketReducer) all-reduces buckets of gradients meanwhile.
#include <optional>
#include <vector>

#include "models/layer.h"
#include "models/optimizer.h"
#include "rpc/transport.h"

namespace pw::pipeline {

// With sharded optimizer state, what one replica updates after finish(): its slices of the
// sharded parameters (elsewhere their gradients hold unspecified values) and the parameters
// reduced whole, which every replica updates alike (tied weights: their gradients are summed over
// stages after the reduction).
struct UpdateShare {
  std::vector<models::ParameterSlice> owned;
  std::vector<models::Parameter*> whole;
};

class GradientSync {
 public:
  virtual ~GradientSync() = default;
  virtual void start_step(std::int64_t step) = 0;
  // `parameter`'s gradient for this step is complete (repeated calls are ignored).
  virtual void ready(models::Parameter* parameter) = 0;
  // Returns once every gradient holds the mean over the replicas; throws TimeoutError at the
  // deadline, or the error a reduction failed with.
  virtual void finish(rpc::Deadline deadline) = 0;
  // Makes a pending or future finish() throw AbortedError (another stage or rank failed).
  virtual void abort(const std::string& reason) = 0;
  // Sharded optimizer state: this replica's share of the update (nullopt: every gradient is
  // reduced whole and every replica updates every parameter).
  virtual std::optional<UpdateShare> update_share() const { return std::nullopt; }
  // After every replica updated its share: each replica's weights become their owners' (called
  // by every replica after each applied update; nothing to do when the state is not sharded).
  virtual void gather_weights(rpc::Deadline /*deadline*/) {}
};

}  // namespace pw::pipeline
