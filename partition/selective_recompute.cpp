#include "partition/selective_recompute.h"

#include <algorithm>

#include "kernels/allocator.h"

namespace pw::partition {

PieceStash piece_stash(const std::vector<LayerProfile>& layers, StageRange range, const std::set<std::string>& recomputed,
                       PieceInput input) {
  PieceStash out;
  const auto layer = [&](int i) -> const LayerProfile& { return layers.at(static_cast<std::size_t>(i)); };
  const auto recomputes = [&](int i) { return recomputed.contains(layer(i).name); };
  // Held as the allocator holds it: a block rounded up, as the profile's kept bytes are.
  const auto block = [](std::int64_t bytes) {
    return static_cast<std::int64_t>(kernels::CachingAllocator::round_size(static_cast<std::size_t>(bytes)));
  };
  // The previous layer's output, when its context keeps it (or, before the first layer, an input
  // held elsewhere).
  std::int64_t previous_kept_output = input == PieceInput::HeldElsewhere ? block(layer(range.begin).input_bytes) : 0;
  for (int i = range.begin; i < range.end;) {
    if (!recomputes(i)) {
      if (i == range.begin) out.input_held_bytes = layer(i).kept_input_bytes - std::min(layer(i).kept_input_bytes, previous_kept_output);
      out.held_bytes += layer(i).stash_bytes - std::min(layer(i).kept_input_bytes, previous_kept_output);
      // A reshape hands on its input's storage: whatever kept that keeps its output too.
      previous_kept_output = layer(i).output_views_input ? std::max(previous_kept_output, layer(i).kept_input_bytes)
                                                         : layer(i).kept_output_bytes;
      ++i;
      continue;
    }
    // A run [i, end): its input is held (once, if the layer before keeps it as its output).
    const std::int64_t run_input = block(layer(i).input_bytes);
    out.held_bytes += run_input - std::min(run_input, previous_kept_output);
    if (i == range.begin) out.input_held_bytes = run_input - std::min(run_input, previous_kept_output);
    std::int64_t rebuilt = 0, kept_output = run_input;
    bool views = true;   // every layer of the run a reshape: its output is the input it keeps
    int end = i;
    for (; end < range.end && recomputes(end); ++end) {
      rebuilt += layer(end).stash_bytes - std::min(layer(end).kept_input_bytes, kept_output);
      kept_output = layer(end).output_views_input ? std::max(kept_output, layer(end).kept_input_bytes)
                                                  : layer(end).kept_output_bytes;
      views = views && layer(end).output_views_input;
      out.rebuild_seconds += layer(end).forward_seconds;
      ++out.recomputed_layers;
    }
    out.rebuild_bytes = std::max(out.rebuild_bytes, rebuilt);
    previous_kept_output = views ? run_input : 0;   // else the run keeps nothing of its output
    i = end;
  }
  return out;
}

}  // namespace pw::partition
