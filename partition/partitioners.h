#pragma once
// Partitioners that need no measurements: equal layer counts, or balanced parameter counts.
// The profiled one lives in profile_partitioner.h.
#include <cstdint>
#include <string>
#include <vector>

#include "pipewright/enums.h"
#include "partition/model_description.h"

namespace pw::partition {

// PartitionMethod and its names: pipewright/enums.h.

// "uniform", "params", "profile"; anything else is an InputError listing them.
PartitionMethod parse_partition_method(const std::string& name);
std::string partition_method_name(PartitionMethod method);

// Stage s gets layers [floor(s*n/P), floor((s+1)*n/P)): sizes differ by at most one.
Partition partition_uniform(int layer_count, int stages);

// Contiguous non-empty stages minimising the largest per-stage parameter count (exact).
Partition partition_by_params(const std::vector<std::int64_t>& layer_parameters, int stages);

// Parameter count of every layer (each built alone, not initialised).
std::vector<std::int64_t> layer_parameter_counts(const ModelDescription& model);

std::int64_t stage_parameters(const std::vector<std::int64_t>& layer_parameters, StageRange range);

}  // namespace pw::partition
