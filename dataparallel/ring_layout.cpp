#include "dataparallel/ring_layout.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace pw::dp {

std::int64_t piece_count(std::int64_t total, std::int64_t piece) {
  PW_CHECK(total >= 0 && piece >= 1, "cannot cut " << total << " elements into pieces of " << piece);
  return total / piece + (total % piece != 0 ? 1 : 0);
}

RingLayout::RingLayout(std::int64_t elements, int members, std::int64_t chunk_elements)
    : elements_(elements), members_(members), chunk_elements_(chunk_elements) {
  PW_CHECK(elements >= 0 && members >= 1 && chunk_elements >= 1,
           "ring of " << members << " members over " << elements << " elements in chunks of " << chunk_elements);
  const std::int64_t longest = elements / members + (elements % members != 0 ? 1 : 0);
  const std::int64_t chunks = std::max<std::int64_t>(1, piece_count(longest, chunk_elements));
  PW_CHECK(chunks <= std::numeric_limits<int>::max() / (2 * members),
           elements << " elements in chunks of " << chunk_elements << " are too many messages for one operation");
  chunks_ = static_cast<int>(chunks);
}

ElementRange RingLayout::segment(int index) const {
  const int i = ((index % members_) + members_) % members_;
  const std::int64_t base = elements_ / members_;
  const std::int64_t longer = elements_ % members_;   // the first `longer` segments hold one more
  const std::int64_t begin = i * base + std::min<std::int64_t>(i, longer);
  return {begin, base + (i < longer ? 1 : 0)};
}

ElementRange RingLayout::chunk(int segment_index, int chunk_index) const {
  PW_CHECK(chunk_index >= 0 && chunk_index < chunks_, "chunk " << chunk_index << " of " << chunks_);
  const ElementRange s = segment(segment_index);
  const std::int64_t offset = std::min(s.count, chunk_index * chunk_elements_);
  return {s.begin + offset, std::min(chunk_elements_, s.count - offset)};
}

}  // namespace pw::dp
