#include "partition/piece_placement.h"

#include "core/error.h"

namespace pw::partition {

namespace {

void check_shape(ChunkPlacement placement, int stages, int chunks) {
  PW_CHECK(stages >= 1 && chunks >= 1, stages << " stages, " << chunks << " chunks");
  PW_CHECK(placement != ChunkPlacement::V || chunks == 2, "V placement with " << chunks << " chunks (it takes 2)");
}

}  // namespace

PieceLocation locate_piece(ChunkPlacement placement, int stages, int chunks, int piece) {
  check_shape(placement, stages, chunks);
  PW_CHECK(piece >= 0 && piece < stages * chunks, "piece " << piece << " of " << stages * chunks);
  if (placement == ChunkPlacement::V)
    return piece < stages ? PieceLocation{piece, 0} : PieceLocation{2 * stages - 1 - piece, 1};
  return {piece % stages, piece / stages};
}

int piece_at(ChunkPlacement placement, int stages, int chunks, int stage, int chunk) {
  check_shape(placement, stages, chunks);
  PW_CHECK(stage >= 0 && stage < stages, "stage " << stage << " of " << stages);
  PW_CHECK(chunk >= 0 && chunk < chunks, "chunk " << chunk << " of " << chunks);
  if (placement == ChunkPlacement::V) return chunk == 0 ? stage : 2 * stages - 1 - stage;
  return chunk * stages + stage;
}

}  // namespace pw::partition
