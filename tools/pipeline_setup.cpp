#include "tools/pipeline_setup.h"

#include <cstdio>
#include <sstream>

#include "core/units.h"
#include "kernels/runtime.h"
#include "kernels/stream.h"
#include "models/optimizer.h"
#include "partition/partitioners.h"
#include "partition/profiler.h"
#include "pipeline/planner.h"

namespace pw::tools {

std::vector<kernels::Device> parse_devices(const TrainOptions& o, int stages) {
  const int replicas = std::max(1, o.replicas);
  const int ranks = stages * replicas;
  std::vector<kernels::Device> devices;
  if (!o.devices.empty()) {
    std::stringstream in(o.devices);
    std::string item;
    while (std::getline(in, item, ',')) devices.push_back(kernels::Device::parse(item));
    PW_INPUT_CHECK(static_cast<int>(devices.size()) == ranks,
                   "--devices lists " << devices.size() << " devices for " << stages << " stages"
                                      << (replicas > 1 ? " x " + std::to_string(replicas) + " replicas" : std::string())
                                      << "; give one per " << (replicas > 1 ? "rank (replica-major)" : "stage")
                                      << ", e.g. cpu:0,cpu:1");
  } else {
    const auto base = kernels::Device::parse(o.device);
    const int gpus = kernels::cuda_device_count();
    for (int s = 0; s < ranks; ++s)
      devices.push_back(base.is_cpu() ? kernels::Device::cpu(s) : kernels::Device::cuda(gpus > 0 ? s % gpus : 0));
  }
  const int gpus = kernels::cuda_device_count();
  for (const auto& d : devices)
    PW_INPUT_CHECK(d.is_cpu() || d.index < gpus, "device " << d.str() << ": this machine has " << gpus
                                                           << " CUDA device(s)" << (gpus == 0 ? "; use cpu:N devices" : ""));
  return devices;
}

pipeline::ScheduleSpec schedule_of(const TrainOptions& o) {
  pipeline::ScheduleSpec s;
  s.kind = pipeline::parse_schedule_kind(o.schedule);
  s.chunks = o.chunks;
  const int pieces = o.split.empty() ? 0 : static_cast<int>(partition::parse_split_points(o.split).size()) + 1;
  if (o.stages > 0) {
    s.stages = o.stages;
    PW_INPUT_CHECK(pieces == 0 || pieces == s.stages * s.chunks,
                   "--split " << o.split << " makes " << pieces << " pieces but --stages " << s.stages << " x --chunks "
                              << s.chunks << " needs " << s.stages * s.chunks);
  } else {
    PW_INPUT_CHECK(pieces % s.chunks == 0, "--split " << o.split << " makes " << pieces
                                                      << " pieces, not a multiple of --chunks " << s.chunks);
    s.stages = pieces > 0 ? pieces / s.chunks : 1;
  }
  s.micro_batches = o.micro_batches > 0 ? o.micro_batches : s.stages;
  validate(s);
  return s;
}

void check_pipeline_flags(const TrainOptions& o, const partition::ModelDescription& model,
                          const pipeline::ScheduleSpec& spec) {
  partition::check_stage_count(model.layer_count(), spec.stages * spec.chunks, model.name);
  if (!o.split.empty())
    partition::split_at(model.layer_count(), partition::parse_split_points(o.split), {"--split", model.name});
  const std::int64_t replicas = std::max(1, o.replicas);
  PW_INPUT_CHECK(o.batch_size % replicas == 0, "--batch-size " << o.batch_size << " (the global batch) does not split "
                                                               "evenly over " << replicas << " replicas; use a multiple of "
                                                               << replicas);
  const std::int64_t local = o.batch_size / replicas;
  PW_INPUT_CHECK(local % spec.micro_batches == 0,
                 "--batch-size " << o.batch_size << (replicas > 1 ? " (" + std::to_string(local) + " per replica)" : "")
                                 << " does not split into " << spec.micro_batches
                                 << " equal micro-batches; use a batch size divisible by " << replicas * spec.micro_batches);
}

partition::Partition split_for(const TrainOptions& o, const partition::ModelDescription& model,
                               const pipeline::ScheduleSpec& spec, kernels::Device profile_on) {
  pipeline::SplitChoice choice;
  if (!o.split.empty()) choice.split_points = partition::parse_split_points(o.split);
  else choice.method = partition::parse_partition_method(o.partition);
  partition::CostModel cost;
  cost.stages = spec.stages;
  cost.chunks = spec.chunks;
  cost.micro_batches = spec.micro_batches;
  cost.in_flight = pipeline::in_flight_of(spec.kind);
  cost.recompute = partition::parse_recompute(o.recompute);
  cost.optimizer_state = partition::optimizer_state_tensors(models::parse_optimizer_kind(o.optimizer));
  if (!o.device_memory.empty()) cost.device_memory = {parse_bytes(o.device_memory)};
  std::vector<partition::LayerProfile> profiles;
  if (choice.split_points.empty() && choice.method == partition::PartitionMethod::Profile) {
    partition::check_stage_count(model.layer_count(), cost.pieces(), model.name);
    std::fprintf(stderr, "profiling %d layers of %s on %s...\n", model.layer_count(), model.name.c_str(),
                 profile_on.str().c_str());
    profiles = partition::profile_layers(model, profile_on, o.batch_size / std::max(1, o.replicas) / spec.micro_batches, 3);
  }
  return pipeline::choose_partition(model, choice, cost, profiles);
}

std::size_t bucket_bytes_of(const TrainOptions& o) {
  std::int64_t bytes = 0;
  try {
    bytes = parse_bytes(o.bucket_size);
  } catch (const InputError& e) {
    throw InputError(std::string("--bucket-size: ") + e.what());
  }
  PW_INPUT_CHECK(bytes > 0, "--bucket-size " << o.bucket_size << ": a gradient bucket needs at least one byte");
  return static_cast<std::size_t>(bytes);
}

}  // namespace pw::tools
