#pragma once
// Ranking metrics for binary classifiers.
#include <cstdint>
#include <vector>

namespace pw::models {

// Exact area under the ROC curve: the probability that a random positive scores above a random
// negative, ties counting one half (Mann-Whitney U with mid-ranks). O(n log n).
// labels are 0 or 1; both classes must be present (an InputError otherwise).
double roc_auc(const std::vector<double>& scores, const std::vector<std::int64_t>& labels);

}  // namespace pw::models
