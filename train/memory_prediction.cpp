#include "train/memory_prediction.h"

#include <algorithm>

#include "partition/cost_model.h"

namespace pw::train {
namespace {

using kernels::MemoryKind;

std::int64_t block(std::int64_t bytes) {
  return static_cast<std::int64_t>(kernels::CachingAllocator::round_size(static_cast<std::size_t>(bytes)));
}

std::int64_t blocks(const std::vector<std::int64_t>& tensors, std::int64_t divisor = 1) {
  std::int64_t total = 0;
  for (const auto bytes : tensors) total += block((bytes + divisor - 1) / divisor);
  return total;
}

std::int64_t& at(kernels::BytesByKind& bytes, MemoryKind kind) { return bytes[static_cast<std::size_t>(kind)]; }

// The replicas' flat gradient buckets (dataparallel/bucket_reducer.cpp): each parameter's gradient
// padded to 256 bytes, about bucket_bytes a bucket, one block each.
std::int64_t bucket_blocks(const std::vector<std::int64_t>& tensors, std::int64_t bucket_bytes) {
  constexpr std::int64_t kAlign = 256;
  std::int64_t total = 0, current = 0;
  for (const auto bytes : tensors) {
    current += (bytes + kAlign - 1) / kAlign * kAlign;
    if (current >= bucket_bytes) {
      total += block(current);
      current = 0;
    }
  }
  return current > 0 ? total + block(current) : total;
}

}  // namespace

kernels::BytesByKind weight_memory(const std::vector<const partition::LayerProfile*>& layers, const MemorySettings& s) {
  std::vector<std::int64_t> params, copied, buffers;
  for (const auto* layer : layers) {
    params.insert(params.end(), layer->parameter_tensor_bytes.begin(), layer->parameter_tensor_bytes.end());
    copied.insert(copied.end(), layer->copied_tensor_bytes.begin(), layer->copied_tensor_bytes.end());
    buffers.insert(buffers.end(), layer->buffer_tensor_bytes.begin(), layer->buffer_tensor_bytes.end());
  }
  const bool mixed = s.precision != models::Precision::Fp32;
  const bool replicated = s.replicas > 1;
  const bool sharded = replicated && s.optimizer_state == dp::OptimizerState::Sharded;
  kernels::BytesByKind out{};
  // Weights: F32 values; under mixed precision the convolution and linear weights are the fp32
  // masters and each has a 16-bit copy (2 bytes a parameter) that the ops read (offloaded, the
  // 16-bit copy is the weight's value and the master is host memory).
  const std::int64_t master = mixed ? blocks(copied) : 0;
  at(out, MemoryKind::Parameters) = blocks(params) - master + blocks(buffers);
  at(out, MemoryKind::Parameters) += compute_copy_bytes(layers, s.precision);
  at(out, MemoryKind::MasterWeights) = master;
  // Gradients are F32 on every parameter; with replicas they move into the flat buckets the
  // all-reduce (or reduce-scatter) works on, which are their only home (counted as gradients).
  at(out, MemoryKind::Gradients) = replicated ? bucket_blocks(params, s.bucket_bytes) : blocks(params);
  if (sharded) {
    // Sharding moves the weights into buckets beside their gradients, one kind of weight a bucket:
    // fp32 weights, and under mixed precision the 16-bit copies, whose fp32 masters each replica
    // keeps for its own 1/R segment only.
    std::vector<std::int64_t> plain = params;
    for (const auto bytes : mixed ? copied : std::vector<std::int64_t>{}) {
      const auto it = std::find(plain.begin(), plain.end(), bytes);
      if (it != plain.end()) plain.erase(it);
    }
    const std::int64_t copied_buckets = mixed ? bucket_blocks(copied, s.bucket_bytes) : 0;
    at(out, MemoryKind::Gradients) = bucket_blocks(plain, s.bucket_bytes) + copied_buckets;
    at(out, MemoryKind::Parameters) = bucket_blocks(plain, s.bucket_bytes) + copied_buckets / 2 + blocks(buffers);
    at(out, MemoryKind::MasterWeights) = copied_buckets / s.replicas;
  }
  // Offloaded, the fp32 masters live in host memory beside the state (models/host_offload.h): the
  // device keeps the 16-bit weights the layers compute with, counted above as parameters.
  if (s.offload == models::OptimizerOffload::Host) at(out, MemoryKind::MasterWeights) = 0;
  // Optimizer state: F32 tensors per parameter (Adam 2, SGD and Adagrad 1); sharded, each replica
  // keeps those of its 1/R slice of the stage.
  const int tensors = partition::optimizer_state_tensors(s.optimizer);
  at(out, MemoryKind::OptimizerState) =
      s.offload == models::OptimizerOffload::Host ? 0 : tensors * blocks(params, sharded ? s.replicas : 1);
  return out;
}

std::int64_t update_undo_bytes(const std::vector<const partition::LayerProfile*>& layers, const MemorySettings& s) {
  if (s.update_validation != pipeline::UpdateValidation::After) return 0;
  std::vector<std::int64_t> params, copied;
  for (const auto* layer : layers) {
    params.insert(params.end(), layer->parameter_tensor_bytes.begin(), layer->parameter_tensor_bytes.end());
    copied.insert(copied.end(), layer->copied_tensor_bytes.begin(), layer->copied_tensor_bytes.end());
  }
  const bool mixed = s.precision != models::Precision::Fp32;
  const bool sharded = s.replicas > 1 && s.optimizer_state == dp::OptimizerState::Sharded;
  auto weights = weight_memory(layers, s);
  // A copied weight's value is its fp32 master, except where the master is a tensor of its own
  // (a sharded replica's segment, or host memory when offloaded) and the value its 16-bit copy.
  std::int64_t values = blocks(params);
  if (mixed && (sharded || s.offload == models::OptimizerOffload::Host))
    values += compute_copy_bytes(layers, s.precision) - blocks(copied);
  std::int64_t out = values + at(weights, MemoryKind::OptimizerState);
  if (sharded) out += at(weights, MemoryKind::MasterWeights);
  if (s.precision == models::Precision::Fp16) out += blocks(params);   // the gradients, scaled in place
  return out;
}

std::int64_t compute_copy_bytes(const std::vector<const partition::LayerProfile*>& layers, models::Precision precision) {
  if (precision == models::Precision::Fp32) return 0;
  std::int64_t total = 0;
  for (const auto* layer : layers)
    for (const auto bytes : layer->copied_tensor_bytes) total += block(bytes / 2);
  return total;
}

std::int64_t largest_compute_copy_bytes(const std::vector<const partition::LayerProfile*>& layers,
                                       models::Precision precision) {
  if (precision == models::Precision::Fp32) return 0;
  std::int64_t largest = 0;
  for (const auto* layer : layers)
    for (const auto bytes : layer->copied_tensor_bytes) largest = std::max(largest, block(bytes / 2));
  return largest;
}

std::int64_t activation_memory(std::int64_t fp32_activation_bytes, const MemorySettings& s) {
  // 16-bit activations are half the size of the fp32 ones the profiler measured, unless the device
  // runs the ops via F32 (then the contexts hold the converted operands).
  if (s.precision == models::Precision::Fp32 || s.half_activations == HalfActivations::ViaF32)
    return fp32_activation_bytes;
  return fp32_activation_bytes / 2;
}

kernels::BytesByKind stage_memory(const std::vector<const partition::LayerProfile*>& layers,
                                  std::int64_t fp32_activation_bytes, const MemorySettings& s) {
  auto out = weight_memory(layers, s);
  at(out, MemoryKind::Activations) += activation_memory(fp32_activation_bytes, s);
  return out;
}

std::int64_t total_bytes(const kernels::BytesByKind& bytes) {
  std::int64_t total = 0;
  for (const auto b : bytes) total += b;
  return total;
}

}  // namespace pw::train
