#include "partition/partitioners.h"

#include <numeric>

#include "core/error.h"
#include "partition/min_max_split.h"

namespace pw::partition {

PartitionMethod parse_partition_method(const std::string& name) { return parse_enum<PartitionMethod>(name); }

std::string partition_method_name(PartitionMethod method) { return std::string(enum_name(method)); }

Partition partition_uniform(int layer_count, int stages) {
  PW_CHECK(stages >= 1 && stages <= layer_count, "cannot split " << layer_count << " layers into " << stages << " stages");
  Partition partition;
  const auto n = static_cast<std::int64_t>(layer_count);
  for (int s = 0; s < stages; ++s) {
    partition.push_back({static_cast<int>(s * n / stages), static_cast<int>((s + 1) * n / stages)});
  }
  return partition;
}

std::int64_t stage_parameters(const std::vector<std::int64_t>& layer_parameters, StageRange range) {
  return std::accumulate(layer_parameters.begin() + range.begin, layer_parameters.begin() + range.end, std::int64_t{0});
}

Partition partition_by_params(const std::vector<std::int64_t>& layer_parameters, int stages) {
  const auto n = static_cast<int>(layer_parameters.size());
  std::vector<std::int64_t> prefix(layer_parameters.size() + 1, 0);
  std::partial_sum(layer_parameters.begin(), layer_parameters.end(), prefix.begin() + 1);
  const auto result = min_max_split(n, stages, [&](int, int begin, int end) {
    return static_cast<double>(prefix[static_cast<std::size_t>(end)] - prefix[static_cast<std::size_t>(begin)]);
  });
  return result.partition;
}

std::vector<std::int64_t> layer_parameter_counts(const ModelDescription& model) {
  std::vector<std::int64_t> counts;
  counts.reserve(model.layers.size());
  for (const auto& spec : model.layers) counts.push_back(spec.build()->parameter_count());
  return counts;
}

}  // namespace pw::partition
