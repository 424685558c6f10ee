#include "train/memory_bounds.h"

#include <algorithm>
#include <string>

#include "core/units.h"

namespace pw::train {
namespace {

// Bytes per sample the loader keeps for every sample of a synthetic set: the epoch's shuffled
// order and this replica's slice of it (int64 each); synthetic-clicks also ranks every sample's
// score (double) to draw its labels.
std::int64_t synthetic_bytes_per_sample(const std::string& dataset) {
  if (dataset == "synthetic") return 16;
  if (dataset == "synthetic-clicks") return 32;
  return 0;
}

bool any_cuda(const Resources& r) {
  if (r.device.is_cuda()) return true;
  return std::any_of(r.devices.begin(), r.devices.end(), [](const kernels::Device& d) { return d.is_cuda(); });
}

}  // namespace

void check_host_memory(const JobPlan& plan, std::int64_t host_bytes) {
  if (host_bytes <= 0) return;
  const JobConfig& c = plan.config;
  const std::string host = format_bytes(host_bytes);

  const std::int64_t per_sample = synthetic_bytes_per_sample(c.data.dataset);
  if (per_sample > 0 && c.data.synthetic_size > host_bytes / per_sample)
    throw ConfigError("/data/synthetic_size",
                      std::to_string(c.data.synthetic_size) + " samples need at least " +
                          std::to_string(per_sample) + " bytes each for the loader's epoch order (" +
                          format_bytes(c.data.synthetic_size > INT64_MAX / per_sample ? INT64_MAX
                                                                                      : c.data.synthetic_size * per_sample) +
                          "), more than this host's " + host + " of memory; at most " +
                          std::to_string(host_bytes / per_sample) + " fit");

  // One micro-batch's activations through the whole model, spread over the stages: the busiest
  // stage holds at least its share. On a GPU they live in device memory; the cap checks those.
  if (any_cuda(c.resources)) return;
  const std::int64_t per_activation = plan.stats.activation_bytes_per_sample /
                                      (plan.precision == models::Precision::Fp32 ? 1 : 2);
  const std::int64_t pieces = std::max(1, plan.schedule.stages);
  const std::int64_t micro_batch = c.data.batch_size / c.replicas.replicas / std::max(1, plan.schedule.micro_batches);
  if (per_activation <= 0 || micro_batch <= 0) return;
  const std::int64_t fits = host_bytes / per_activation * pieces;
  if (micro_batch > fits)
    throw ConfigError("/data/batch_size",
                      std::to_string(c.data.batch_size) + ": a micro-batch of " + std::to_string(micro_batch) +
                          " samples at " + format_bytes(per_activation) + " of activations each needs at least " +
                          format_bytes((micro_batch + pieces - 1) / pieces * per_activation) + " on " +
                          (pieces > 1 ? "the busiest of " + std::to_string(pieces) + " stages" : std::string("its rank")) +
                          ", more than this host's " + host + " of memory; at most " + std::to_string(fits) +
                          " samples per micro-batch fit");
}

}  // namespace pw::train
