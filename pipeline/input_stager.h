#pragma once
// Moves a step's micro-batches (inputs on the first stage, labels on the last) onto the stage's
// device. On a GPU every copy is issued at the step's start on a stream of its own, into device
// buffers kept from step to step, and micro-batch m's forward waits on the device (not the host)
// for m's copy alone: later micro-batches arrive while earlier ones compute, and from the loader's
// pinned buffers the host never waits. On a CPU device it is Tensor::to.
#include <optional>
#include <vector>

#include "kernels/stream.h"
#include "kernels/tensor.h"

namespace pw::pipeline {

class InputStager {
 public:
  explicit InputStager(kernels::Device device);
  ~InputStager();
  InputStager(const InputStager&) = delete;
  InputStager& operator=(const InputStager&) = delete;

  // Issues the copies of `parts` (equal shapes and dtype; undefined or empty ones are skipped).
  // The host tensors are kept until the copies are known to be done, at the next stage().
  void stage(const std::vector<kernels::Tensor>& parts);
  // Part m on the device; work later queued on this thread's current stream waits for its copy.
  kernels::Tensor take(int m);
  // Every use of this step's parts is queued on the current stream: the next step's copies
  // overwrite the buffers only after the device has passed this point.
  void release();

 private:
  void drain_previous_copies();

  kernels::Device device_;
  std::vector<kernels::Tensor> host_;     // this step's parts, alive until their copies are done
  std::vector<kernels::Tensor> staged_;   // views of buffer_ (GPU) or the host parts (CPU)
  kernels::Tensor buffer_;                // the device buffer, reused while the parts fit
  std::optional<kernels::Stream> copy_stream_;
  std::vector<kernels::Event> copied_;    // one per part
  std::optional<kernels::Event> released_;
  bool release_recorded_ = false;
};

}  // namespace pw::pipeline
