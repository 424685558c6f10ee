#include "partition/min_max_split.h"

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace pw::partition {

MinMaxSplit min_max_split(int items, int groups, const GroupCost& cost) {
  PW_CHECK(groups >= 1 && groups <= items, "cannot split " << items << " items into " << groups << " non-empty groups");
  const auto n = static_cast<std::size_t>(items);
  // best[g][e]: the smallest achievable worst cost when groups 0..g cover items [0, e).
  // cut[g][e]: where group g begins in that split.
  std::vector<std::vector<double>> best(static_cast<std::size_t>(groups), std::vector<double>(n + 1, kInfeasible));
  std::vector<std::vector<int>> cut(static_cast<std::size_t>(groups), std::vector<int>(n + 1, -1));
  for (int e = 1; e <= items - (groups - 1); ++e) {
    best[0][static_cast<std::size_t>(e)] = cost(0, 0, e);
    cut[0][static_cast<std::size_t>(e)] = 0;
  }
  for (int g = 1; g < groups; ++g) {
    const auto gi = static_cast<std::size_t>(g);
    // Group g ends at e; groups after it still need one item each.
    for (int e = g + 1; e <= items - (groups - 1 - g); ++e) {
      double chosen = kInfeasible;
      int chosen_cut = -1;
      for (int b = g; b < e; ++b) {
        const double before = best[gi - 1][static_cast<std::size_t>(b)];
        if (before == kInfeasible) continue;
        const double here = cost(g, b, e);
        const double worst = std::max(before, here);
        // `<=` keeps the latest begin among ties: the last group takes as little as the optimum allows.
        if (worst <= chosen && worst != kInfeasible) {
          chosen = worst;
          chosen_cut = b;
        }
      }
      best[gi][static_cast<std::size_t>(e)] = chosen;
      cut[gi][static_cast<std::size_t>(e)] = chosen_cut;
    }
  }
  MinMaxSplit result;
  result.worst_cost = best[static_cast<std::size_t>(groups - 1)][n];
  if (result.worst_cost == kInfeasible) return result;
  result.partition.resize(static_cast<std::size_t>(groups));
  int end = items;
  for (int g = groups - 1; g >= 0; --g) {
    const int begin = cut[static_cast<std::size_t>(g)][static_cast<std::size_t>(end)];
    result.partition[static_cast<std::size_t>(g)] = {begin, end};
    end = begin;
  }
  return result;
}

}  // namespace pw::partition
