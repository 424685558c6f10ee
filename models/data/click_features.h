#pragma once
// The layout of one click-log sample, shared by the synthetic click data and the DLRM model.
//
// A sample travels as ONE F32 row, so that click data flows through the same loaders, stages and
// transports as images do:
//   [dense_0 .. dense_{D-1} | f0_id_0 .. f0_id_{bag-1} | f1_id_0 .. | ... | f{S-1}_id_{bag-1}]
// Dense features are plain floats. Id columns hold integer-valued floats: sparse feature f's ids
// are 0 <= id < table_sizes[f] <= 2^24 (16,777,216), the range where every integer is exact in F32.
// Every sample has exactly `bag_size` ids per feature.
#include <cstdint>
#include <vector>

namespace pw::models::data {

inline constexpr std::int64_t kMaxPackedId = std::int64_t{1} << 24;

struct ClickFeatures {
  int dense = 4;                                        // dense features per sample
  std::vector<std::int64_t> table_sizes = {1000, 1000, 1000};   // rows per sparse feature's table
  int bag_size = 2;                                     // ids per sparse feature per sample

  int sparse() const { return static_cast<int>(table_sizes.size()); }
  std::int64_t width() const { return dense + static_cast<std::int64_t>(sparse()) * bag_size; }
  std::int64_t id_column(int feature, int k) const { return dense + static_cast<std::int64_t>(feature) * bag_size + k; }
};

// InputError (one line) unless dense >= 0, at least one sparse feature, bag_size >= 1 and every
// table size in [1, 2^24].
void check_click_features(const ClickFeatures& features);

}  // namespace pw::models::data
