#include "models/data/synthetic_clicks.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "models/metrics.h"
#include "models/rng.h"

namespace pw::models::data {

SyntheticClicks::SyntheticClicks(ClickFeatures features, std::int64_t size, std::uint64_t seed, Split split,
                                 double zipf_exponent)
    : features_(std::move(features)), size_(size), seed_(seed), split_(split), zipf_exponent_(zipf_exponent) {
  check_click_features(features_);
  PW_INPUT_CHECK(size_ >= 0, "synthetic-clicks size " << size_ << " is negative; expected a count >= 0");
  PW_INPUT_CHECK(zipf_exponent_ > 1.0, "synthetic-clicks Zipf exponent " << zipf_exponent_ << "; expected > 1");
  sample_seed_ = hash_name(seed, split == Split::Train ? "clicks/train" : "clicks/test");
  Rng rng(hash_name(seed, "clicks/dense-weights"));
  const double scale = features_.dense > 0 ? 1.0 / std::sqrt(static_cast<double>(features_.dense)) : 0.0;
  for (int j = 0; j < features_.dense; ++j) dense_weights_.push_back(scale * rng.normal());
}

std::string SyntheticClicks::name() const {
  return "synthetic-clicks (" + std::to_string(features_.dense) + " dense, " + std::to_string(features_.sparse()) +
         " sparse x bag " + std::to_string(features_.bag_size) + ", seed " + std::to_string(seed_) +
         (split_ == Split::Train ? ", train)" : ", test)");
}

double SyntheticClicks::id_weight(int feature, std::int64_t id) const {
  Rng rng(splitmix64(hash_name(seed_, "clicks/id-weights") ^ splitmix64(static_cast<std::uint64_t>(feature))) ^
          splitmix64(static_cast<std::uint64_t>(id) + 0x5bd1e995ULL));
  return kClickIdWeightStd * rng.normal();
}

// Inverse CDF of the continuous power law on [1, rows + 1) with density ~ x^-s, floored to a rank:
// O(1) per draw and nothing stored, so tables of any size cost the same.
std::int64_t SyntheticClicks::zipf_id(double u, std::int64_t rows) const {
  const double a = 1.0 - zipf_exponent_;
  const double top = std::pow(static_cast<double>(rows) + 1.0, a);
  const double x = std::pow(1.0 + u * (top - 1.0), 1.0 / a);
  return std::clamp<std::int64_t>(static_cast<std::int64_t>(x) - 1, 0, rows - 1);
}

double SyntheticClicks::draw(std::int64_t index, float* out, std::int64_t& label_out) const {
  PW_CHECK(index >= 0 && index < size_, "sample " << index << " outside the synthetic-clicks set's " << size_);
  Rng rng(sample_seed_ ^ splitmix64(static_cast<std::uint64_t>(index)));
  double logit = kClickBias;
  for (int j = 0; j < features_.dense; ++j) {
    const double x = rng.normal();
    out[j] = static_cast<float>(x);
    logit += dense_weights_[static_cast<std::size_t>(j)] * static_cast<double>(out[j]);
  }
  for (int f = 0; f < features_.sparse(); ++f) {
    const std::int64_t rows = features_.table_sizes[static_cast<std::size_t>(f)];
    double bag_sum = 0.0;
    for (int k = 0; k < features_.bag_size; ++k) {
      const std::int64_t id = zipf_id(rng.uniform(), rows);
      out[features_.id_column(f, k)] = static_cast<float>(id);
      bag_sum += id_weight(f, id);
    }
    logit += bag_sum / features_.bag_size;
  }
  const double p = 1.0 / (1.0 + std::exp(-logit));
  label_out = rng.uniform() < p ? 1 : 0;
  return logit;
}

void SyntheticClicks::fill(std::int64_t index, float* sample_out, std::int64_t& label_out) const {
  draw(index, sample_out, label_out);
}

double SyntheticClicks::true_logit(std::int64_t index) const {
  std::vector<float> sample(static_cast<std::size_t>(features_.width()));
  std::int64_t label = 0;
  return draw(index, sample.data(), label);
}

double SyntheticClicks::true_auc() const {
  std::vector<float> sample(static_cast<std::size_t>(features_.width()));
  std::vector<double> scores(static_cast<std::size_t>(size_));
  std::vector<std::int64_t> labels(static_cast<std::size_t>(size_));
  for (std::int64_t i = 0; i < size_; ++i) {
    scores[static_cast<std::size_t>(i)] = draw(i, sample.data(), labels[static_cast<std::size_t>(i)]);
  }
  return roc_auc(scores, labels);
}

std::unique_ptr<SyntheticClicks> make_synthetic_clicks(const ClickFeatures& features, std::int64_t size,
                                                       std::uint64_t seed, Split split) {
  return std::make_unique<SyntheticClicks>(features, size, seed, split);
}

}  // namespace pw::models::data
