#pragma once
// How a stage's rows that live outside it (embedding tables on parameter servers) take part in
// its optimizer step. Layers know nothing of where their rows live: the implementation
// (dp::RemoteRowsRegistry) holds the stage's server-backed layers, and the executor calls it once
// per step, beside the gradient sync and the update check.
#include <vector>

#include "kernels/tensor.h"

namespace pw::pipeline {

// What a step sends to the servers: its gradients, or nothing (a skipped step, which still
// counts as the worker's step).
enum class RemoteGradients { Push, Discard };

class RemoteRowsSync {
 public:
  virtual ~RemoteRowsSync() = default;
  // The sum of squares of the gradients waiting to be sent (0 with none): remote rows count in
  // the step's finiteness check and in clipping.
  virtual double gradient_sum_of_squares() = 0;
  virtual void scale_gradients(double factor) = 0;
  // Once per optimizer step, after the local update: sends (or drops) the step's gradients.
  virtual void finish_step(RemoteGradients what) = 0;
  // The model inputs of the next step's micro-batches, given while the current step still runs
  // (first stage only): the rows they will look up start coming.
  virtual void prefetch(const std::vector<kernels::Tensor>& next_micro_batches) = 0;
  // Returns once every send of an earlier step has been answered (sends leave in the
  // background); a send's error surfaces here or at the next step.
  virtual void flush() = 0;
};

}  // namespace pw::pipeline
