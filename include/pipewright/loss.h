#pragma once
// A program's own loss, computed on the host from the last stage's outputs and the labels, as
// torch.distributed.pipelining's loss_fn or DeepSpeed's PipelineModule(loss_fn=...). Set it on the
// model description (ModelDescription::loss); without one a model trains with softmax cross-entropy.
//
//   model.loss_name = "label-smoothing-0.1";   // part of the job's identity: checkpoints check it
//   model.loss = [](const pw::models::LossInput& in) { ...; return pw::models::LossValue{loss, correct, grad}; };
#include <cstdint>
#include <functional>
#include <vector>

namespace pw::models {

struct LossInput {
  std::vector<std::int64_t> shape;   // of the outputs: [N, ...], one row per sample of the micro-batch
  const float* outputs = nullptr;    // row-major, the product of `shape` many
  const std::int64_t* labels = nullptr;   // N labels, as the data set gave them
};

struct LossValue {
  double loss = 0.0;          // the mean over the N rows
  std::int64_t correct = 0;   // rows counted as right, for the accuracy figures (0 where that means nothing)
  std::vector<float> grad;    // d loss / d outputs (of the mean), the same size as the outputs
};

// Called from the last stage's thread, one micro-batch at a time; it must not keep the pointers.
using LossFunction = std::function<LossValue(const LossInput&)>;

}  // namespace pw::models
