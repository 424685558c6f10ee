#pragma once
// Where the pieces of a ring all-reduce lie in a flat buffer: `members` segments of nearly equal
// length (the first `elements % members` one element longer), each cut into the same number of
// chunks of at most `chunk_elements`, so that every member computes the same pieces and large
// segments travel as several messages. Pure arithmetic; a chunk may be empty (nothing is sent).
#include <cstdint>

namespace pw::dp {

struct ElementRange {
  std::int64_t begin = 0;
  std::int64_t count = 0;
};

class RingLayout {
 public:
  RingLayout(std::int64_t elements, int members, std::int64_t chunk_elements);

  int members() const { return members_; }
  int chunks_per_segment() const { return chunks_; }
  ElementRange segment(int index) const;   // index taken modulo members (negative too)
  ElementRange chunk(int segment_index, int chunk_index) const;

 private:
  std::int64_t elements_;
  int members_;
  std::int64_t chunk_elements_;
  int chunks_;
};

// Contiguous pieces of at most `piece` of `total` elements (broadcast's chunks): how many.
std::int64_t piece_count(std::int64_t total, std::int64_t piece);

}  // namespace pw::dp
