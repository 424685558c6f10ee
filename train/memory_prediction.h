#pragma once
// Predicted device memory of one pipeline stage, in the allocator's own kinds (kernels::MemoryKind:
// parameters, gradients, master weights, optimizer state, activations, communication, workspace),
// from the profiles of the stage's layers and what the job says about precision, optimizer,
// replicas and sharding: what `pipewright plan` prints beside the summary's measured `memory`, and
// what the layout search checks against each device's cap.
#include <cstdint>
#include <vector>

#include "kernels/allocator.h"
#include "models/optimizer.h"
#include "models/precision.h"
#include "partition/profiler.h"
#include "pipewright/enums.h"
#include "pipeline/update_check.h"

namespace pw::train {

// How 16-bit activations are held: in 16 bits, or, where the device runs the layers' ops via F32
// (BF16 on a CPU without AVX-512: kernels/ops/half_support.h), at about their F32 size, since the
// contexts keep the converted operands.
enum class HalfActivations { Native, ViaF32 };

struct MemorySettings {
  models::Precision precision = models::Precision::Fp32;
  HalfActivations half_activations = HalfActivations::Native;
  models::OptimizerKind optimizer = models::OptimizerKind::Adam;
  int replicas = 1;
  dp::OptimizerState optimizer_state = dp::OptimizerState::Replicated;
  std::int64_t bucket_bytes = std::int64_t{25} << 20;   // gradient buckets with replicas
  // Host: the optimizer state and the fp32 masters are host memory (--offload-optimizer), none of
  // them on the device.
  models::OptimizerOffload offload = models::OptimizerOffload::None;
  // Resolved (never Auto). After: the stage updates before the job's verdict on the step and keeps
  // a copy of what the update changes until the verdict comes (pipeline/optimistic_update.h).
  pipeline::UpdateValidation update_validation = pipeline::UpdateValidation::Before;
};

// What a stage's weights cost on its device: parameters (and their 16-bit copies), gradients,
// fp32 master weights, optimizer state and, with replicas, the flat gradient buckets. The one place
// the bytes-per-parameter rules live (Megatron's 16 + 0 in fp32 Adam, 18 in bf16 Adam; with
// sharding, 1/R of the optimizer state and of the fp32 masters; offloaded, neither on the device).
kernels::BytesByKind weight_memory(const std::vector<const partition::LayerProfile*>& layers, const MemorySettings& s);

// The 16-bit compute copies of the convolution and linear weights under mixed precision (0 in fp32).
std::int64_t compute_copy_bytes(const std::vector<const partition::LayerProfile*>& layers, models::Precision precision);

// The largest of those: the update rounds one weight at a time into a workspace tensor.
std::int64_t largest_compute_copy_bytes(const std::vector<const partition::LayerProfile*>& layers,
                                       models::Precision precision);

// What a stage that updates before the verdict (UpdateValidation::After) holds beside its weights
// during the update: a copy of every tensor the optimizer step changes (each parameter's value, the
// fp32 masters that are tensors of their own, the optimizer state on the device) and, under fp16
// loss scaling, of the gradients the update scales. 0 with Before.
std::int64_t update_undo_bytes(const std::vector<const partition::LayerProfile*>& layers, const MemorySettings& s);

// The stashed activations the schedule keeps in flight plus one layer's working set (the cost
// model's activation_bytes, measured in fp32), in the job's activation precision.
std::int64_t activation_memory(std::int64_t fp32_activation_bytes, const MemorySettings& s);

// Both, for a stage holding `layers` and `fp32_activation_bytes` of activations at its peak.
kernels::BytesByKind stage_memory(const std::vector<const partition::LayerProfile*>& layers,
                                  std::int64_t fp32_activation_bytes, const MemorySettings& s);

std::int64_t total_bytes(const kernels::BytesByKind& bytes);

}  // namespace pw::train
