#pragma once
// The profiled partitioner: contiguous pieces that minimise the slowest piece's step time (compute
// plus sending its boundary activation) while every piece fits its device's memory cap.
#include <string>
#include <vector>

#include "partition/cost_model.h"
#include "partition/model_description.h"
#include "partition/profiler.h"

namespace pw::partition {

// P * V contiguous pieces (placed on devices as CostModel::placement says). Throws InputError saying by how much the
// least-over split misses the cap when no split fits.
Partition partition_by_profile(const std::vector<LayerProfile>& layers, const CostModel& cost,
                               const std::string& model_name);

}  // namespace pw::partition
