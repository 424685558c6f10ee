#pragma once
// How a stage's gradients are combined with its replicas' (data parallelism). The executor tells
// it when each parameter's gradient for the step is final (during the last backward that adds to
// it, layer by layer) and waits for the result before the optimizer step; the implementation
// (dataparallel::BucketReducer) all-reduces buckets of gradients meanwhile.
#include "models/layer.h"
#include "rpc/transport.h"

namespace pw::pipeline {

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
};

}  // namespace pw::pipeline
