#pragma once
// What a piece holds per micro-batch when some of its layers recompute (torch.utils.checkpoint on
// chosen layers, as models::Sequential runs it): a run of consecutive recomputed layers keeps only
// its input, and its backward first re-runs the run's forwards, holding the run's contexts again
// while it goes back through them.
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "partition/model_description.h"
#include "partition/profiler.h"

namespace pw::partition {

struct PieceStash {
  std::int64_t held_bytes = 0;     // kept per micro-batch from its forward until its backward
  std::int64_t input_held_bytes = 0;   // the part of held_bytes that is the piece's own input
  std::int64_t rebuild_bytes = 0;  // the largest run's contexts, rebuilt for one micro-batch's backward
  double rebuild_seconds = 0.0;    // forwards re-run per micro-batch
  int recomputed_layers = 0;
};

// Whose the piece's input is: received from the piece before (its layers' keeping it is what
// holds it), or held anyway by someone else (the first piece's input is a view of the data
// loader's batch), which its layers then keep at no cost.
enum class PieceInput { Received, HeldElsewhere };

// Layers [range.begin, range.end) of `layers`, those named in `recomputed` recomputing. A tensor
// one layer keeps as its output and the next keeps as its input is counted once.
PieceStash piece_stash(const std::vector<LayerProfile>& layers, StageRange range, const std::set<std::string>& recomputed,
                       PieceInput input = PieceInput::Received);

}  // namespace pw::partition
