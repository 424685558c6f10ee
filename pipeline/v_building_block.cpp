#include "pipeline/v_building_block.h"

#include <algorithm>
#include <array>
#include <deque>
#include <utility>

#include "core/error.h"

namespace pw::pipeline {

namespace {

// The passes of one micro-batch on one stage, in the order the block places them.
enum Pass { kForward0, kForward1, kInput1, kInput0, kWeight1, kWeight0, kPasses };

constexpr int kFree = -1;

enum class PackPass { WarmUpAndCoolDown, CoolDownWithoutWeights };

struct Placed {
  int stage;
  Pass pass;
  int micro_batch;
  int slot;
};

bool is_forward(Pass pass) { return pass == kForward0 || pass == kForward1; }
bool is_weight(Pass pass) { return pass == kWeight1 || pass == kWeight0; }

// Slot of each of the four non-weight passes of micro-batch 0 on `stage` (see v_building_block.h).
// The extra gap between the last forward and the first input gradient keeps the four passes of
// every stage on distinct slots modulo 6 (v-min when P is a multiple of 3, v-half when P is even;
// the gaps of zbv_greedy.py's stable patterns, checked for every P up to 200),
// and v-half leaves one slot between chunk 1's last input gradient and chunk 0's first, for a weight.
std::array<int, 4> block_slots(ScheduleKind kind, int stages, int stage) {
  const int p = stages, s = stage;
  if (kind == ScheduleKind::VMin) {
    const int gap = p % 3 == 0 ? 2 : 0;
    return {s, 2 * p - 1 - s, 2 * p + gap + s, 4 * p + gap - 1 - s};
  }
  const int gap = p % 2 == 0 ? 3 : 0;
  return {2 * s, 3 * p - 2 - s, 3 * p - 1 + gap + 2 * s, 6 * p + gap - 2 - s};
}

class BlockPlan {
 public:
  explicit BlockPlan(const ScheduleSpec& spec) : p_(spec.stages), m_(spec.micro_batches) {
    ops_.resize(static_cast<std::size_t>(p_ * kPasses * m_));
    slots_.resize(static_cast<std::size_t>(p_));
    for (int s = 0; s < p_; ++s) {
      const auto base = block_slots(spec.kind, p_, s);
      for (int pass = 0; pass < 4; ++pass)
        for (int mb = 0; mb < m_; ++mb) place(id(s, static_cast<Pass>(pass), mb), s, static_cast<Pass>(pass), mb,
                                              base[static_cast<std::size_t>(pass)] + 6 * mb);
      place_weights(s);
    }
    limit_ = 0;
    for (int s = 0; s < p_; ++s) limit_ = std::max(limit_, peak(s));
  }

  // Pulls ops, in slot order, to the earliest free slot after their inputs that keeps the stage's
  // activations within the block's peak. The steady state (from stage 0's first chunk-0 input half
  // to its last chunk-0 forward, in slot order) stays as the block put it: pulling it earlier too
  // would shift the stages against each other, which costs nothing with unit times but makes the
  // order idle in every block for some unequal ones. The first pass moves the warm-up and the
  // cool-down with the weight halves in place; the second takes the weight halves out, moves only
  // the cool-down, and puts them back into the first free slots after their input halves.
  void pack(PackPass pass) {
    const bool with_weights = pass == PackPass::WarmUpAndCoolDown;
    const auto key = [&](int op) { return std::pair{at(op).slot, at(op).stage}; };
    const auto steady_from = key(id(0, kInput0, 0)), steady_to = key(id(0, kForward0, m_ - 1));
    // With few micro-batches stage 0 runs its last forward before its first input half: no steady state.
    const bool has_steady_state = steady_from <= steady_to;
    if (!with_weights)
      for (int s = 0; s < p_; ++s) unplace_weights(s);
    std::vector<int> order;
    for (int i = 0; i < static_cast<int>(ops_.size()); ++i)
      if (with_weights || !is_weight(at(i).pass)) order.push_back(i);
    std::sort(order.begin(), order.end(), [&](int a, int b) { return key(a) < key(b); });
    for (int i : order) {
      const auto k = key(i);
      const bool before = has_steady_state && k < steady_from, after = !has_steady_state || k > steady_to;
      if (after || (before && with_weights)) pull_earlier(i, pass);
    }
    if (!with_weights)
      for (int s = 0; s < p_; ++s) place_weights(s);
  }

  int limit() const { return limit_; }
  int peak_held() const {
    int out = 0;
    for (int s = 0; s < p_; ++s) out = std::max(out, peak(s));
    return out;
  }

  std::vector<std::vector<BlockOp>> orders() const {
    std::vector<std::vector<BlockOp>> out(static_cast<std::size_t>(p_));
    for (int s = 0; s < p_; ++s) {
      for (int op : slots_[static_cast<std::size_t>(s)]) {
        if (op == kFree) continue;
        const Placed& x = ops_[static_cast<std::size_t>(op)];
        const int chunk = x.pass == kForward0 || x.pass == kInput0 || x.pass == kWeight0 ? 0 : 1;
        const OpType type = is_forward(x.pass) ? OpType::Forward
                            : is_weight(x.pass) ? OpType::BackwardWeight
                                                : OpType::BackwardInput;
        out[static_cast<std::size_t>(s)].push_back({type, x.micro_batch, chunk});
      }
    }
    return out;
  }

 private:
  int id(int stage, Pass pass, int mb) const { return (stage * kPasses + pass) * m_ + mb; }
  Placed& at(int op) { return ops_[static_cast<std::size_t>(op)]; }
  std::vector<int>& row(int stage) { return slots_[static_cast<std::size_t>(stage)]; }

  void place(int op, int stage, Pass pass, int mb, int slot) {
    at(op) = {stage, pass, mb, slot};
    auto& r = row(stage);
    if (static_cast<int>(r.size()) <= slot) r.resize(static_cast<std::size_t>(slot + 1), kFree);
    PW_CHECK(r[static_cast<std::size_t>(slot)] == kFree || r[static_cast<std::size_t>(slot)] == op,
             "building block: stage " << stage << " slot " << slot << " taken twice");
    r[static_cast<std::size_t>(slot)] = op;
  }
  void move(int op, int slot) {
    Placed& x = at(op);
    row(x.stage)[static_cast<std::size_t>(x.slot)] = kFree;
    place(op, x.stage, x.pass, x.micro_batch, slot);
  }

  // Each weight half into the first free slot after its input half: chunk 1's before chunk 0's when
  // both wait (as the authors' scheduler places them), each chunk's oldest first.
  void place_weights(int stage) {
    std::deque<int> pending[2];   // input halves of chunk 1 and of chunk 0 whose weight half is not placed
    for (int t = 0;; ++t) {
      auto& r = row(stage);
      if (t >= static_cast<int>(r.size()) && pending[0].empty() && pending[1].empty()) break;
      const int here = t < static_cast<int>(r.size()) ? r[static_cast<std::size_t>(t)] : kFree;
      if (here == kFree) {
        auto& queue = pending[0].empty() ? pending[1] : pending[0];
        if (queue.empty()) continue;
        const Placed& input = at(queue.front());
        const Pass weight = input.pass == kInput1 ? kWeight1 : kWeight0;
        place(id(stage, weight, input.micro_batch), stage, weight, input.micro_batch, t);
        queue.pop_front();
      } else if (const Pass pass = at(here).pass; pass == kInput1 || pass == kInput0) {
        pending[pass == kInput1 ? 0 : 1].push_back(here);
      }
    }
  }
  void unplace_weights(int stage) {
    for (int& op : row(stage))
      if (op != kFree && is_weight(at(op).pass)) op = kFree;
  }

  // The ops that must be done before `op` starts: its inputs from the neighbouring stage (or the
  // turn at either end of the V), its own input half for a weight half, and the same pass of the
  // previous micro-batch on this stage, so that each pass keeps micro-batch order.
  std::vector<int> inputs(int op) const {
    const Placed& x = ops_[static_cast<std::size_t>(op)];
    const int s = x.stage, mb = x.micro_batch, last = p_ - 1;
    std::vector<int> out;
    switch (x.pass) {
      case kForward0: if (s > 0) out.push_back(id(s - 1, kForward0, mb)); break;
      case kForward1: out.push_back(s == last ? id(s, kForward0, mb) : id(s + 1, kForward1, mb)); break;
      case kInput1: out.push_back(s == 0 ? id(s, kForward1, mb) : id(s - 1, kInput1, mb)); break;
      case kInput0: out.push_back(s == last ? id(s, kInput1, mb) : id(s + 1, kInput0, mb)); break;
      case kWeight1: out.push_back(id(s, kInput1, mb)); break;
      case kWeight0: out.push_back(id(s, kInput0, mb)); break;
      default: break;
    }
    if (!is_weight(x.pass) && mb > 0) out.push_back(id(s, x.pass, mb - 1));
    return out;
  }

  // Chunk activations held during each slot of `stage`, a forward counted until its weight half.
  std::vector<int> held(int stage) const {
    const auto& r = slots_[static_cast<std::size_t>(stage)];
    std::vector<int> out(r.size(), 0);
    int now = 0;
    for (std::size_t t = 0; t < r.size(); ++t) {
      if (r[t] != kFree) {
        const Pass pass = ops_[static_cast<std::size_t>(r[t])].pass;
        if (is_forward(pass)) ++now;
        if (is_weight(pass)) --now;
      }
      out[t] = now;
    }
    return out;
  }
  int peak(int stage) const {
    const auto h = held(stage);
    return h.empty() ? 0 : *std::max_element(h.begin(), h.end());
  }

  void pull_earlier(int op, PackPass pass) {
    const bool weights_placed = pass == PackPass::WarmUpAndCoolDown;
    const Placed x = at(op);
    int ready = 0;
    for (int input : inputs(op)) ready = std::max(ready, at(input).slot + 1);
    if (ready >= x.slot) return;
    // With the weight halves in the slots, only a forward can raise the stage's activations. Without
    // them, any op moved into a free slot may push a weight half later: check with them put back.
    const std::vector<int> h = weights_placed && is_forward(x.pass) ? held(x.stage) : std::vector<int>{};
    for (int t = ready; t < x.slot; ++t) {
      if (row(x.stage)[static_cast<std::size_t>(t)] != kFree) continue;
      if (weights_placed && is_forward(x.pass)) {
        bool fits = true;
        for (int u = t; u < x.slot && fits; ++u) fits = h[static_cast<std::size_t>(u)] + 1 <= limit_;
        if (!fits) continue;
      }
      if (!weights_placed && !fits_with_weights(op, t)) continue;
      move(op, t);
      return;
    }
  }

  // With the weight halves not in the slots, whether `op` moved to `slot` keeps the stage within
  // the limit once they are placed again.
  bool fits_with_weights(int op, int slot) {
    const int stage = at(op).stage, from = at(op).slot;
    move(op, slot);
    place_weights(stage);
    const bool fits = peak(stage) <= limit_;
    unplace_weights(stage);
    move(op, from);
    return fits;
  }

  int p_, m_;
  int limit_ = 0;
  std::vector<Placed> ops_;
  std::vector<std::vector<int>> slots_;   // per stage: the op in each slot, or kFree
};

}  // namespace

int building_block_activation_limit(ScheduleKind kind, int stages) {
  switch (kind) {
    case ScheduleKind::VHalf: return 2 * ((stages + 2) / 2);
    case ScheduleKind::VMin: return 2 * ((stages + 4) / 3);
    default: PW_FAIL("no building block for the " << schedule_kind_name(kind) << " schedule");
  }
}

std::vector<std::vector<BlockOp>> building_block_v_orders(const ScheduleSpec& spec) {
  PW_CHECK(spec.kind == ScheduleKind::VHalf || spec.kind == ScheduleKind::VMin,
           "no building block for the " << schedule_kind_name(spec.kind) << " schedule");
  BlockPlan plan(spec);
  plan.pack(PackPass::WarmUpAndCoolDown);
  BlockPlan packed = plan;
  plan.pack(PackPass::CoolDownWithoutWeights);
  // Putting the weight halves back greedily may, rarely, hold an activation longer than the first
  // pass did; keep that pass's result then.
  return (plan.peak_held() <= packed.limit() ? plan : packed).orders();
}

}  // namespace pw::pipeline
