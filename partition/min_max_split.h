#pragma once
// The dynamic program behind the partitioners: split n items into P contiguous non-empty groups
// minimising the largest group cost, where a group's cost may depend on its position.
#include <functional>
#include <limits>

#include "partition/model_description.h"

namespace pw::partition {

inline constexpr double kInfeasible = std::numeric_limits<double>::infinity();

// cost(group, begin, end) of items [begin, end) as group `group` (0..groups-1); kInfeasible rules
// that placement out.
using GroupCost = std::function<double(int group, int begin, int end)>;

struct MinMaxSplit {
  Partition partition;       // empty when every split is infeasible
  double worst_cost = kInfeasible;
};

// Exact: O(groups * items^2) cost evaluations. Ties are broken deterministically: each group,
// from the last, starts as late as an optimal split allows.
MinMaxSplit min_max_split(int items, int groups, const GroupCost& cost);

}  // namespace pw::partition
