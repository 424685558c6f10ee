#include "train/memory_bounds.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "core/units.h"
#include "models/zoo/model_spec.h"

namespace pw::train {
namespace {

using models::saturating_add;
using models::saturating_mul;

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

// "1234", "45.8 million", "2.05 billion".
std::string count_text(std::int64_t n) {
  char text[64];
  if (n >= 1'000'000'000) std::snprintf(text, sizeof text, "%.2f billion", static_cast<double>(n) / 1e9);
  else if (n >= 1'000'000) std::snprintf(text, sizeof text, "%.1f million", static_cast<double>(n) / 1e6);
  else std::snprintf(text, sizeof text, "%lld", static_cast<long long>(n));
  return text;
}

// The lowest memory.max on the way from this process's control group (v2) up to the root; 0: none.
std::pair<std::int64_t, std::string> cgroup_memory_max() {
  std::ifstream self("/proc/self/cgroup");
  std::string line, path;
  while (std::getline(self, line))
    if (line.rfind("0::", 0) == 0) path = line.substr(3);
  if (path.empty()) return {0, ""};
  std::pair<std::int64_t, std::string> lowest{0, ""};
  std::filesystem::path dir = std::filesystem::path("/sys/fs/cgroup") / std::filesystem::path(path).relative_path();
  for (int depth = 0; depth < 64; ++depth) {
    std::ifstream file(dir / "memory.max");
    std::string value;
    if (file >> value && value != "max") {
      try {
        const std::int64_t bytes = std::stoll(value);
        if (bytes > 0 && (lowest.first == 0 || bytes < lowest.first)) lowest = {bytes, (dir / "memory.max").string()};
      } catch (const std::exception&) {
      }
    }
    if (dir == "/sys/fs/cgroup" || !dir.has_parent_path() || dir.parent_path() == dir) break;
    dir = dir.parent_path();
  }
  return lowest;
}

// Where a model's size comes from: the field to name and its value, in words.
struct SizeSource {
  std::string path;
  std::string value;
};

SizeSource size_source(const JobPlan& plan) {
  const JobConfig& c = plan.config;
  if (c.program_model && !c.program_model->layers.empty()) return {"/model", "the program's model " + plan.model.name};
  const std::string& name = c.model.name;
  if (name == "dlrm") {
    const auto tables = c.model.embedding_rows.empty() ? models::data::ClickFeatures{}.table_sizes : c.model.embedding_rows;
    std::int64_t rows = 0;
    for (const auto r : tables) rows = saturating_add(rows, r);
    return {"/model/embedding_rows", std::to_string(tables.size()) + " tables of " + std::to_string(rows) +
                                         " rows in all at /model/embedding_dim " + std::to_string(c.model.embedding_dim)};
  }
  if (name.rfind("resnet", 0) == 0 || name == "vgg16") return {"/model/width", std::to_string(c.model.width)};
  // The seed CNN's size follows its input's.
  std::string shape;
  for (const auto d : plan.data.sample_shape) shape += (shape.empty() ? "" : "x") + std::to_string(d);
  if (c.data.dataset == "synthetic") return {"/data/synthetic_shape", shape};
  if (c.data.dataset == "image-folder" || c.data.dataset == "shards")
    return {"/data/image_size", std::to_string(c.data.image_size)};
  return {"/model/name", name + " on samples of " + shape};
}

// The largest sum of a run of layers between the split points, or the largest layer without a
// usable split; counts[i] is layer i's.
std::int64_t largest_piece(const std::vector<std::int64_t>& counts, const std::vector<int>& split) {
  const int n = static_cast<int>(counts.size());
  bool usable = !split.empty();
  for (std::size_t i = 0; i < split.size() && usable; ++i)
    usable = split[i] > 0 && split[i] < n && (i == 0 || split[i] > split[i - 1]);
  std::int64_t largest = 0;
  if (!usable) {
    for (const auto k : counts) largest = std::max(largest, k);
    return largest;
  }
  std::int64_t piece = 0;
  std::size_t next = 0;
  for (int i = 0; i < n; ++i) {
    if (next < split.size() && i == split[next]) {
      largest = std::max(largest, piece);
      piece = 0;
      ++next;
    }
    piece = saturating_add(piece, counts[static_cast<std::size_t>(i)]);
  }
  return std::max(largest, piece);
}

}  // namespace

HostMemory physical_memory(std::int64_t physical_bytes) {
  if (physical_bytes <= 0) return {};
  return {physical_bytes, "this host's " + format_bytes(physical_bytes) + " of memory"};
}

HostMemory host_memory_limit(std::int64_t physical_bytes) {
  HostMemory lowest = physical_memory(physical_bytes);
  const auto lower = [&](std::int64_t bytes, const std::string& what) {
    if (bytes > 0 && (lowest.bytes == 0 || bytes < lowest.bytes)) lowest = {bytes, what};
  };
  // What this process may map (ulimit -v) or hold as data (ulimit -d): none of a job's tensors can
  // live outside them.
  const std::pair<int, const char*> limits[] = {{RLIMIT_AS, "address space (ulimit -v)"}, {RLIMIT_DATA, "data (ulimit -d)"}};
  for (const auto& [resource, name] : limits) {
    rlimit limit{};
    if (getrlimit(resource, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) continue;
    const auto bytes = static_cast<std::int64_t>(std::min<rlim_t>(limit.rlim_cur, std::numeric_limits<std::int64_t>::max()));
    lower(bytes, "the " + format_bytes(bytes) + " of " + name + " this process may use");
  }
  const auto [cgroup_bytes, file] = cgroup_memory_max();
  lower(cgroup_bytes, "the " + format_bytes(cgroup_bytes) + " this process's control group may use (" + file + ")");
  return lowest;
}

void check_model_memory(const JobPlan& plan, const HostMemory& host) {
  if (host.bytes <= 0) return;
  const JobConfig& c = plan.config;
  const bool cuda = any_cuda(c.resources);
  const bool offloaded = plan.optimizer.offload == models::OptimizerOffload::Host;
  // On a GPU the weights, gradients and (unless offloaded) the state are device memory.
  if (cuda && !offloaded) return;

  std::vector<std::int64_t> counts;
  std::int64_t total = 0;
  std::size_t largest_layer = 0;
  for (const auto& layer : plan.model.layers) {
    counts.push_back(std::max<std::int64_t>(layer.parameters, 0));
    total = saturating_add(total, counts.back());
    if (counts.back() > counts[largest_layer]) largest_layer = counts.size() - 1;
  }
  if (total <= 0) return;
  const int stages = std::max(1, plan.schedule.stages);
  const std::vector<int>& split = !c.pipeline.split.empty() ? c.pipeline.split : plan.model.split_points;
  // The busiest stage holds at least its share of the whole and the largest piece no split divides.
  const std::int64_t busiest = std::max(total / stages + (total % stages != 0 ? 1 : 0), largest_piece(counts, split));

  // Bytes a parameter: the weight (F32, or its 16-bit copy under mixed precision, where the master
  // may be sharded), its F32 gradient, and the optimizer's F32 state (a 1/R share when sharded).
  const std::int64_t weight = plan.precision == models::Precision::Fp32 ? 4 : 2;
  const std::int64_t state = 4 * partition::optimizer_state_tensors(plan.optimizer.kind);
  const int shards = c.replicas.optimizer_state == dp::OptimizerState::Sharded ? std::max(1, c.replicas.replicas) : 1;
  const std::int64_t state_bytes = saturating_mul(busiest, state) / shards;
  const std::int64_t needed = cuda ? state_bytes : saturating_add(saturating_mul(busiest, weight + 4), state_bytes);
  if (needed <= host.bytes) return;

  const SizeSource source = size_source(plan);
  const std::string optimizer = std::string(enum_name(plan.optimizer.kind)) + " optimizer state (" +
                                std::to_string(state) + (shards > 1 ? ", a 1/" + std::to_string(shards) + " share" : "") +
                                ")";
  std::string problem = source.value + ": " + plan.model.name + " has " + count_text(total) + " parameters";
  if (counts[largest_layer] < total)
    problem += " (layer " + plan.model.layers[largest_layer].name + " alone " + count_text(counts[largest_layer]) + ")";
  if (c.model.name == "dlrm" && !(c.program_model && !c.program_model->layers.empty())) {
    const auto tables = static_cast<std::int64_t>(
        c.model.embedding_rows.empty() ? models::data::ClickFeatures{}.table_sizes.size() : c.model.embedding_rows.size());
    problem += "; its interaction of " + std::to_string(tables) + " tables is " +
               std::to_string(models::dlrm_interaction_width(tables + 1, c.model.embedding_dim)) +
               " values wide (a value for each pair), the width of the top MLP's first layer";
  }
  problem += stages > 1 ? "; the busiest of " + std::to_string(stages) + " stages holds at least " + count_text(busiest) +
                              " of them and needs at least "
                        : "; its one stage needs at least ";
  problem += format_bytes(needed) + " for " +
             (cuda ? optimizer + " offloaded to host memory"
                   : "their weights (" + std::to_string(weight) + " bytes a parameter), gradients (4) and " + optimizer) +
             ", more than " + host.what;
  throw ConfigError(source.path, problem);
}

void check_host_memory(const JobPlan& plan, std::int64_t host_bytes) {
  check_host_memory(plan, physical_memory(host_bytes));
}

void check_host_memory(const JobPlan& plan, const HostMemory& memory) {
  const std::int64_t host_bytes = memory.bytes;
  if (host_bytes <= 0) return;
  const JobConfig& c = plan.config;

  const std::int64_t per_sample = synthetic_bytes_per_sample(c.data.dataset);
  if (per_sample > 0 && c.data.synthetic_size > host_bytes / per_sample)
    throw ConfigError("/data/synthetic_size",
                      std::to_string(c.data.synthetic_size) + " samples need at least " +
                          std::to_string(per_sample) + " bytes each for the loader's epoch order (" +
                          format_bytes(c.data.synthetic_size > INT64_MAX / per_sample ? INT64_MAX
                                                                                      : c.data.synthetic_size * per_sample) +
                          "), more than " + memory.what + "; at most " +
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
                          ", more than " + memory.what + "; at most " + std::to_string(fits) +
                          " samples per micro-batch fit");
}

}  // namespace pw::train
