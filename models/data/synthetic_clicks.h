#pragma once
// Synthetic click logs drawn from a KNOWN generating model, so a trained model's test AUC can be
// compared with the best achievable one.
//
// Hidden model (fixed by the seed, shared by both splits):
//   logit = bias + sum_j a_j x_j + sum_f mean_k w_f(id_fk)
//   a_j ~ N(0, 1/D) (dense weights), w_f(id) ~ N(0, kIdWeightStd^2) per id (hashed, not stored),
//   bias = kBias.
// Per sample (from seed, split and index): x_j ~ N(0, 1); ids per feature Zipf-distributed over
// the table (P(id = r) roughly proportional to (r + 1)^-s, s = zipf_exponent, id 0 the hottest);
// label ~ Bernoulli(sigmoid(logit)). Samples are packed as click_features.h describes.
#include <cstdint>
#include <memory>

#include "models/data/click_features.h"
#include "models/data/dataset.h"

namespace pw::models::data {

inline constexpr double kClickIdWeightStd = 1.0;
inline constexpr double kClickBias = -0.5;
inline constexpr double kClickZipfExponent = 1.1;

class SyntheticClicks final : public Dataset {
 public:
  SyntheticClicks(ClickFeatures features, std::int64_t size, std::uint64_t seed, Split split,
                  double zipf_exponent = kClickZipfExponent);

  std::int64_t size() const override { return size_; }
  kernels::Shape sample_shape() const override { return {features_.width()}; }
  int num_classes() const override { return 2; }
  std::string name() const override;
  void fill(std::int64_t index, float* sample_out, std::int64_t& label_out) const override;

  const ClickFeatures& features() const { return features_; }
  // The generating model's logit for sample `index` (the Bayes-optimal score).
  double true_logit(std::int64_t index) const;
  // AUC of the true logits against the drawn labels over this whole split: the known achievable AUC.
  double true_auc() const;

 private:
  double draw(std::int64_t index, float* sample_out, std::int64_t& label_out) const;
  double id_weight(int feature, std::int64_t id) const;
  std::int64_t zipf_id(double u, std::int64_t rows) const;

  ClickFeatures features_;
  std::int64_t size_;
  std::uint64_t seed_;
  Split split_;
  double zipf_exponent_;
  std::uint64_t sample_seed_ = 0;
  std::vector<double> dense_weights_;
};

std::unique_ptr<SyntheticClicks> make_synthetic_clicks(const ClickFeatures& features, std::int64_t size,
                                                       std::uint64_t seed, Split split);

}  // namespace pw::models::data
