#pragma once
// Where the pieces of a model run when each of P stages holds V chunks (P * V consecutive pieces,
// piece 0 takes the inputs and piece P*V-1 computes the loss).
//  - Interleaved (Megatron's interleaving): piece v runs on stage v % P as its chunk v / P, so
//    activations go round the ring of stages V times.
//  - V (Zero Bubble's V shape, exactly two chunks): stage s holds pieces s (chunk 0) and
//    2P-1-s (chunk 1). Activations go down the stages and back up, the turn happens inside
//    stage P-1, and the first and last pieces both live on stage 0 (weights tied between them
//    are local, and the loss is computed where the inputs are read).
namespace pw::partition {

enum class ChunkPlacement { Interleaved, V };

struct PieceLocation {
  int stage = 0;
  int chunk = 0;
  friend bool operator==(const PieceLocation&, const PieceLocation&) = default;
};

// Throws (an internal error) for a piece, stage or chunk out of range, or V placement with chunks != 2.
PieceLocation locate_piece(ChunkPlacement placement, int stages, int chunks, int piece);
int piece_at(ChunkPlacement placement, int stages, int chunks, int stage, int chunk);

}  // namespace pw::partition
