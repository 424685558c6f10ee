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
// reduced whole, which every replica updates alike (those whose weights are not F32). A tied
// weight is sharded with a bucket of its own, so its slices are the same elements on every stage
// holding it and the stages sum the owned segments of its gradient only.
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
  // Sharded optimizer state, after every replica's optimizer step (applied or skipped; every
  // replica calls it): starts making each replica's weights their owners' in the background,
  // bucket by bucket in the order forward uses them, and returns. Nothing may read the weights
  // before await_weights (or await_all_weights) says their buckets arrived.
  virtual void start_gathering_weights() {}
  // Returns once `layer`'s weights (and whatever state it reads that travels with them) hold the
  // gathered values; at once when no gather is under way. Throws TimeoutError at the deadline
  // naming the layer (`name`) and the bucket waited for, AbortedError after abort(), or the error
  // the gather failed with.
  virtual void await_weights(models::Layer& /*layer*/, const std::string& /*name*/, rpc::Deadline /*deadline*/) {}
  // The same for every weight: before anything reads the weights between steps.
  virtual void await_all_weights(rpc::Deadline /*deadline*/) {}
};

}  // namespace pw::pipeline
