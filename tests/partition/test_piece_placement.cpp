// Piece placement: interleaved puts piece v on stage v % P; V puts pieces s and 2P-1-s on stage s,
// so the first and last pieces share stage 0 and the turn stays on stage P-1.
#include <boost/test/unit_test.hpp>

#include "partition/piece_placement.h"

using namespace pw::partition;

BOOST_AUTO_TEST_SUITE(piece_placement)

BOOST_AUTO_TEST_CASE(interleaved_goes_round_the_stages) {
  BOOST_TEST((locate_piece(ChunkPlacement::Interleaved, 4, 2, 5) == PieceLocation{1, 1}));
  BOOST_TEST((locate_piece(ChunkPlacement::Interleaved, 3, 1, 2) == PieceLocation{2, 0}));
  BOOST_TEST(piece_at(ChunkPlacement::Interleaved, 4, 3, 3, 2) == 11);
}

BOOST_AUTO_TEST_CASE(v_goes_down_and_back_up) {
  const int P = 4;
  const std::vector<PieceLocation> want = {{0, 0}, {1, 0}, {2, 0}, {3, 0}, {3, 1}, {2, 1}, {1, 1}, {0, 1}};
  for (int v = 0; v < 2 * P; ++v) {
    BOOST_TEST_CONTEXT("piece " << v) {
      BOOST_TEST((locate_piece(ChunkPlacement::V, P, 2, v) == want[static_cast<std::size_t>(v)]));
      BOOST_TEST(piece_at(ChunkPlacement::V, P, 2, want[static_cast<std::size_t>(v)].stage,
                          want[static_cast<std::size_t>(v)].chunk) == v);
    }
  }
  // One stage: both pieces on it.
  BOOST_TEST((locate_piece(ChunkPlacement::V, 1, 2, 1) == PieceLocation{0, 1}));
}

BOOST_AUTO_TEST_CASE(out_of_range_is_refused) {
  BOOST_CHECK_THROW(locate_piece(ChunkPlacement::V, 2, 3, 0), std::exception);
  BOOST_CHECK_THROW(locate_piece(ChunkPlacement::V, 2, 2, 4), std::exception);
  BOOST_CHECK_THROW(piece_at(ChunkPlacement::Interleaved, 2, 2, 2, 0), std::exception);
}

BOOST_AUTO_TEST_SUITE_END()
