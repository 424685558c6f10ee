#include "train/straggler_detector.h"

#include <algorithm>
#include <map>

#include "core/error.h"

namespace pw::train {
namespace {

constexpr double kLeastShareOfStep = 0.05;

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  const auto mid = v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2);
  std::nth_element(v.begin(), mid, v.end());
  if (v.size() % 2 == 1) return *mid;
  const double upper = *mid;
  return (*std::max_element(v.begin(), mid) + upper) / 2.0;
}

}  // namespace

StragglerDetector::StragglerDetector(int stages, int replicas, double threshold, int window)
    : stages_(stages), replicas_(replicas), threshold_(threshold), window_(window),
      samples_(static_cast<std::size_t>(stages * replicas)) {
  PW_CHECK(stages >= 1 && replicas >= 1 && window >= 1 && threshold > 0, "straggler detector: stages " << stages
                                                                          << ", replicas " << replicas << ", window "
                                                                          << window << ", threshold " << threshold);
}

std::vector<StragglerWindow> StragglerDetector::add(std::int64_t step, const std::vector<double>& own,
                                                    double step_seconds) {
  if (replicas_ < 2 || own.size() != samples_.size()) return {};
  if (samples_.front().empty()) first_step_ = step;
  for (std::size_t r = 0; r < own.size(); ++r) samples_[r].push_back(own[r]);
  step_seconds_.push_back(step_seconds);
  if (static_cast<int>(samples_.front().size()) < window_) return {};

  std::vector<double> medians(samples_.size());
  for (std::size_t r = 0; r < samples_.size(); ++r) medians[r] = median(samples_[r]);
  const auto steps = static_cast<double>(samples_.front().size());
  const double least_excess = kLeastShareOfStep * median(step_seconds_);
  std::vector<StragglerWindow> out;
  for (int s = 0; s < stages_; ++s)
    for (int rep = 0; rep < replicas_; ++rep) {
      const int rank = rep * stages_ + s;
      std::vector<double> peers;
      for (int other = 0; other < replicas_; ++other)
        if (other != rep) peers.push_back(medians[static_cast<std::size_t>(other * stages_ + s)]);
      const double peer = median(peers);
      const double mine = medians[static_cast<std::size_t>(rank)];
      if (peer <= 0.0 || mine <= peer * (1.0 + threshold_) || mine - peer < least_excess) continue;
      StragglerWindow w{rank, s, rep, first_step_, step, mine, peer, mine / peer - 1.0, (mine - peer) * steps};
      cost_seconds_ += w.cost_seconds;
      found_.push_back(w);
      out.push_back(w);
    }
  for (auto& v : samples_) v.clear();
  step_seconds_.clear();
  return out;
}

nlohmann::json StragglerDetector::summary() const {
  std::map<int, nlohmann::json> by_rank;
  for (const auto& w : found_) {
    auto& j = by_rank[w.rank];
    if (j.is_null()) {
      j = {{"rank", w.rank}, {"stage", w.stage}, {"replica", w.replica}, {"windows", 0},
           {"steps", nlohmann::json::array()}, {"max_slower_by", 0.0}, {"cost_seconds", 0.0}};
    }
    j["windows"] = j["windows"].get<int>() + 1;
    j["steps"].push_back({w.first_step, w.last_step});
    j["max_slower_by"] = std::max(j["max_slower_by"].get<double>(), w.slower_by);
    j["cost_seconds"] = j["cost_seconds"].get<double>() + w.cost_seconds;
  }
  nlohmann::json list = nlohmann::json::array();
  for (auto& [rank, j] : by_rank) list.push_back(std::move(j));
  return list;
}

}  // namespace pw::train
