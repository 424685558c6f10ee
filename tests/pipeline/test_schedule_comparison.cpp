// compare_schedules on a model of identical layers: a row per kind, 1F1B's bubble against its
// closed form, held units and bytes, messages that cross stages, and one-line reasons.
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "partition/partitioners.h"
#include "pipeline/schedule_comparison.h"

using namespace pw;
using namespace pw::pipeline;

namespace {

constexpr int kLayers = 8;
constexpr std::int64_t kStash = 1000, kInput = 100;

partition::ModelDescription identical_layers() {
  partition::ModelDescription m;
  m.name = "identical";
  for (int i = 0; i < kLayers; ++i) m.layers.push_back({"layer" + std::to_string(i), nullptr});
  return m;
}

// Every layer F = 1 ms, B = 2 ms, nothing to send (infinite link): stages cost the same.
std::vector<partition::LayerProfile> identical_profiles() {
  std::vector<partition::LayerProfile> profiles(kLayers);
  for (int i = 0; i < kLayers; ++i) {
    auto& p = profiles[static_cast<std::size_t>(i)];
    p.name = "layer" + std::to_string(i);
    p.forward_seconds = 1e-3;
    p.backward_seconds = 2e-3;
    p.stash_bytes = kStash;
    p.weight_half_bytes = kStash;       // a split backward's input half leaves as much for W
    p.input_half_peak_bytes = kStash;   // and holds no more while it runs
    p.input_bytes = kInput;
  }
  return profiles;
}

partition::CostModel layout(int stages, int micro_batches, partition::Recompute recompute = partition::Recompute::None) {
  partition::CostModel c;
  c.stages = stages;
  c.micro_batches = micro_batches;
  c.recompute = recompute;
  c.link.bandwidth_bytes_per_s = 1e30;
  return c;
}

const ScheduleComparison& row_of(const std::vector<ScheduleComparison>& rows, ScheduleKind kind) {
  for (const auto& r : rows)
    if (r.kind == kind) return r;
  BOOST_FAIL("no row for " << schedule_kind_name(kind));
  return rows.front();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(schedule_comparison)

BOOST_AUTO_TEST_CASE(one_row_per_kind_and_1f1b_bubble_is_the_closed_form) {
  for (int p : {2, 4}) {
    const int m = 2 * p;
    const auto rows = compare_schedules(identical_layers(), identical_profiles(), layout(p, m), {}, 2);
    BOOST_TEST_CONTEXT("P=" << p << " M=" << m) {
      BOOST_TEST(rows.size() == enum_names<ScheduleKind>().size());
      const auto& one_f_one_b = row_of(rows, ScheduleKind::OneFOneB);
      BOOST_TEST(one_f_one_b.unavailable.empty());
      BOOST_TEST(one_f_one_b.bubble_fraction == (p - 1.0) / (m + p - 1.0), boost::test_tools::tolerance(1e-9));
      const double per_stage = kLayers / p * 3e-3;   // F + B of one micro-batch on one stage
      BOOST_TEST(one_f_one_b.step_seconds == (m + p - 1) * per_stage, boost::test_tools::tolerance(1e-9));
      // 1F1B holds P - s micro-batches on stage s, each its layers' stash.
      for (int s = 0; s < p; ++s) {
        BOOST_TEST(one_f_one_b.peak_held[static_cast<std::size_t>(s)] == p - s);
        BOOST_TEST(one_f_one_b.peak_activation_bytes[static_cast<std::size_t>(s)] == (p - s) * (kLayers / p) * kStash);
      }
      // One activation down and one gradient up per boundary.
      BOOST_TEST(one_f_one_b.messages_per_micro_batch == 2.0 * (p - 1));
      BOOST_TEST(row_of(rows, ScheduleKind::Interleaved).messages_per_micro_batch == 2.0 * (2 * p - 1));
      const auto& zb_h2 = row_of(rows, ScheduleKind::ZeroBubbleH2);
      BOOST_TEST(zb_h2.unavailable.empty());
      BOOST_TEST(zb_h2.step_seconds <= row_of(rows, ScheduleKind::ZeroBubbleH1).step_seconds + 1e-12);
      BOOST_TEST(zb_h2.peak_held[0] == std::min(2 * p - 1, m));
      const auto& interleaved_zb = row_of(rows, ScheduleKind::InterleavedZeroBubble);
      BOOST_TEST(interleaved_zb.chunks == 2);
      BOOST_TEST(interleaved_zb.bubble_fraction < row_of(rows, ScheduleKind::Interleaved).bubble_fraction);
      for (const auto& r : rows) {
        BOOST_TEST(r.parameter_copies == 1);
        BOOST_TEST(r.unavailable.find('\n') == std::string::npos);
      }
    }
  }
}

// The partitioner's memory estimate (partition/cost_model) budgets what the programs hold.
BOOST_AUTO_TEST_CASE(cost_model_activations_match_the_programs_peaks) {
  const int p = 3, m = 6;
  const auto rows = compare_schedules(identical_layers(), identical_profiles(), layout(p, m), {}, 2);
  for (const ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::ZeroBubbleH2}) {
    partition::CostModel cost = layout(p, m);
    cost.in_flight = in_flight_of(kind);
    const auto estimates =
        partition::estimate_stages(identical_profiles(), cost, partition::partition_uniform(kLayers, p));
    const auto& row = row_of(rows, kind);
    for (int s = 0; s < p; ++s) {
      BOOST_TEST_CONTEXT(schedule_kind_name(kind) << " stage " << s) {
        BOOST_TEST(estimates[static_cast<std::size_t>(s)].activation_bytes ==
                   row.peak_activation_bytes[static_cast<std::size_t>(s)]);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(recomputing_pieces_hold_inputs_plus_one_stash) {
  const auto rows = compare_schedules(identical_layers(), identical_profiles(),
                                      layout(2, 4, partition::Recompute::All), {}, 2);
  const auto& r = row_of(rows, ScheduleKind::OneFOneB);
  BOOST_TEST(r.peak_activation_bytes[1] == kInput + 4 * kStash);   // 1 input held, one 4-layer stash rebuilt
  // Stage 0's inputs are views of the data loader's batch, counted with the loader.
  BOOST_TEST(r.peak_activation_bytes[0] == 4 * kStash);
}

// Under a split backward a unit holds its stash until its input half, then what its weight half
// needs until W; while the input half runs, the piece's input-half peak; the received input the
// layers keep is reported apart (the allocator counts it as communication).
BOOST_AUTO_TEST_CASE(a_split_backward_holds_the_weight_half_from_bi_until_w) {
  const ScheduleSpec spec{ScheduleKind::ZeroBubbleH1, 2, 2, 1};
  std::vector<partition::StageEstimate> pieces(2);
  auto& e = pieces[1];
  e.piece = 1;
  e.device = 1;
  e.stash_bytes = 100;
  e.stash_received_bytes = 10;
  e.weight_half_bytes = 150;
  e.weight_half_received_bytes = 10;
  e.input_half_peak_bytes = 180;
  e.received_bytes = 10;
  using I = Instruction;
  const std::vector<I> split{{OpType::Forward, 0},        {OpType::BackwardInput, 0},  {OpType::Forward, 1},
                             {OpType::BackwardInput, 1},  {OpType::BackwardWeight, 0}, {OpType::BackwardWeight, 1}};
  const auto held = peak_activations(spec, 1, split, pieces);
  BOOST_TEST(held.bytes == 300);                   // two weight halves after Bi1
  BOOST_TEST(held.received_bytes == 20);
  BOOST_TEST(held.input_half_peak_bytes == 330);   // a weight half and a stash, Bi1 running: 150 + 180
  const std::vector<I> whole{{OpType::Forward, 0}, {OpType::Backward, 0}, {OpType::Forward, 1}, {OpType::Backward, 1}};
  const auto one_at_a_time = peak_activations(spec, 1, whole, pieces);
  BOOST_TEST(one_at_a_time.bytes == 100);
  BOOST_TEST(one_at_a_time.input_half_peak_bytes == 0);
}

BOOST_AUTO_TEST_CASE(kinds_that_do_not_fit_the_layout_give_their_reason) {
  // One micro-batch for two stages: only GPipe runs.
  const auto rows = compare_schedules(identical_layers(), identical_profiles(), layout(2, 1), {}, 2);
  for (const auto& r : rows) {
    if (r.kind == ScheduleKind::GPipe) {
      BOOST_TEST(r.unavailable.empty());
    } else {
      BOOST_TEST(r.unavailable.find("it needs at least one per stage") != std::string::npos, r.unavailable);
      BOOST_TEST(r.peak_held.empty());
    }
  }
  // A split into 2 pieces serves the one-chunk kinds on 2 stages, not those with 2 chunks per stage.
  SplitChoice split;
  split.split_points = {4};
  const auto split_rows = compare_schedules(identical_layers(), identical_profiles(), layout(2, 4), split, 2);
  BOOST_TEST(row_of(split_rows, ScheduleKind::ZeroBubbleH2).unavailable.empty());
  BOOST_TEST(row_of(split_rows, ScheduleKind::InterleavedZeroBubble).unavailable ==
             "the split makes 2 pieces; interleaved-zb needs 2 x 2 = 4");
  // Five stages of two chunks need ten pieces of an eight-layer model.
  const auto deep = compare_schedules(identical_layers(), identical_profiles(), layout(5, 5), {}, 2);
  BOOST_TEST(row_of(deep, ScheduleKind::Interleaved).unavailable ==
             "identical has 8 layers, fewer than the 10 pieces interleaved needs");
  BOOST_TEST(row_of(deep, ScheduleKind::OneFOneB).unavailable.empty());
}

BOOST_AUTO_TEST_SUITE_END()
