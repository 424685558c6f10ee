#pragma once
// Every split of n items into P contiguous non-empty groups, for checking the partitioners.
#include <functional>
#include <vector>

#include "partition/model_description.h"

namespace pw::test {

inline void for_each_partition(int items, int groups, const std::function<void(const partition::Partition&)>& visit) {
  partition::Partition current;
  std::function<void(int)> extend = [&](int begin) {
    const int placed = static_cast<int>(current.size());
    if (placed == groups - 1) {
      current.push_back({begin, items});
      visit(current);
      current.pop_back();
      return;
    }
    // Leave at least one item for each group still to place.
    for (int end = begin + 1; end <= items - (groups - 1 - placed); ++end) {
      current.push_back({begin, end});
      extend(end);
      current.pop_back();
    }
  };
  extend(0);
}

}  // namespace pw::test
