#include "models/metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace pw::models {

double roc_auc(const std::vector<double>& scores, const std::vector<std::int64_t>& labels) {
  PW_INPUT_CHECK(scores.size() == labels.size(),
                 "roc_auc: " << scores.size() << " scores but " << labels.size() << " labels; expected one each");
  std::vector<std::size_t> order(scores.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  for (std::size_t i = 0; i < scores.size(); ++i) {
    PW_INPUT_CHECK(labels[i] == 0 || labels[i] == 1, "roc_auc: label " << labels[i] << " at " << i << "; expected 0 or 1");
    PW_INPUT_CHECK(!std::isnan(scores[i]), "roc_auc: score at " << i << " is NaN");
  }
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return scores[a] < scores[b]; });
  // Sum of the positives' 1-based ranks, each group of tied scores sharing its mean rank.
  double positive_rank_sum = 0.0;
  std::int64_t positives = 0;
  for (std::size_t begin = 0; begin < order.size();) {
    std::size_t end = begin;
    std::int64_t group_positives = 0;
    while (end < order.size() && scores[order[end]] == scores[order[begin]]) group_positives += labels[order[end++]];
    const double mean_rank = (static_cast<double>(begin + 1) + static_cast<double>(end)) / 2.0;
    positive_rank_sum += mean_rank * static_cast<double>(group_positives);
    positives += group_positives;
    begin = end;
  }
  const auto negatives = static_cast<std::int64_t>(scores.size()) - positives;
  PW_INPUT_CHECK(positives > 0 && negatives > 0, "roc_auc needs both classes, got " << positives << " positives and "
                                                                                  << negatives << " negatives");
  const double p = static_cast<double>(positives);
  return (positive_rank_sum - p * (p + 1.0) / 2.0) / (p * static_cast<double>(negatives));
}

}  // namespace pw::models
