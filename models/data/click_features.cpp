#include "models/data/click_features.h"

#include "core/error.h"

namespace pw::models::data {

void check_click_features(const ClickFeatures& f) {
  PW_INPUT_CHECK(f.dense >= 0, "click data: " << f.dense << " dense features; expected 0 or more");
  PW_INPUT_CHECK(f.sparse() >= 1, "click data: no sparse features; expected at least one table size");
  PW_INPUT_CHECK(f.bag_size >= 1, "click data: bag size " << f.bag_size << "; expected at least 1");
  for (int i = 0; i < f.sparse(); ++i) {
    const std::int64_t rows = f.table_sizes[static_cast<std::size_t>(i)];
    PW_INPUT_CHECK(rows >= 1 && rows <= kMaxPackedId, "click data: table " << i << " has " << rows
                                                                           << " rows; expected 1.." << kMaxPackedId
                                                                           << " (ids travel as exact F32 integers)");
  }
}

}  // namespace pw::models::data
