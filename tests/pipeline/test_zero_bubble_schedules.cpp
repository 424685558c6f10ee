// ZB-H2 and interleaved zero bubble: every generated program is a whole mini-batch that simulates
// without deadlock; makespans and held micro-batches against closed forms; golden programs.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <utility>

#include "pipeline/planner.h"
#include "pipeline/program_check.h"
#include "pipeline/simulator.h"

using namespace pw::pipeline;

namespace {

struct Costs {
  double f, bi, w;
};
// Equal, input half heavier, weight half heavier.
const Costs kCostSets[] = {{1.0, 1.0, 1.0}, {1.0, 1.5, 0.5}, {1.0, 0.5, 1.5}};

std::vector<ScheduleSpec> generated_specs() {
  std::vector<ScheduleSpec> specs;
  for (int p = 1; p <= 5; ++p) {
    for (int m = p; m <= 12; ++m) {
      specs.push_back({ScheduleKind::ZeroBubbleH2, p, m, 1});
      if (m % p == 0)
        for (int v : {2, 3}) specs.push_back({ScheduleKind::InterleavedZeroBubble, p, m, v});
    }
  }
  return specs;
}

std::string describe(const ScheduleSpec& spec) {
  return schedule_kind_name(spec.kind) + " P=" + std::to_string(spec.stages) + " M=" +
         std::to_string(spec.micro_batches) + " V=" + std::to_string(spec.chunks);
}

double makespan(const ScheduleSpec& spec, Costs c) {
  return simulate(spec, OpTimes::uniform(spec, c.f, c.bi, c.w)).makespan;
}

// Idle time of each stage between the start of its first compute and the end of its last.
std::vector<double> idle_within_span(const ScheduleSpec& spec, Costs c) {
  const SimulationResult r = simulate(spec, OpTimes::uniform(spec, c.f, c.bi, c.w));
  std::vector<double> idle;
  for (const auto& timeline : r.timeline) {
    double first = -1.0, last = 0.0, busy = 0.0;
    for (const TimedOp& op : timeline) {
      const OpType t = op.instruction.op;
      if (t != OpType::Forward && t != OpType::BackwardInput && t != OpType::BackwardWeight) continue;
      if (first < 0.0) first = op.start;
      last = op.end;
      busy += op.end - op.start;
    }
    idle.push_back(last - first - busy);
  }
  return idle;
}

int peak(const ScheduleSpec& spec, int stage, HeldUntil until) { return peak_in_flight(stage_schedule(spec, stage), until); }

std::vector<std::string> program_texts(const ScheduleSpec& spec) {
  std::vector<std::string> texts;
  for (int s = 0; s < spec.stages; ++s) texts.push_back(to_text(stage_schedule(spec, s)));
  return texts;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(zero_bubble_schedules)

BOOST_AUTO_TEST_CASE(every_program_is_a_whole_mini_batch_and_simulates_without_deadlock) {
  for (const ScheduleSpec& spec : generated_specs()) {
    BOOST_TEST_CONTEXT(describe(spec)) {
      for (int s = 0; s < spec.stages; ++s) BOOST_CHECK_NO_THROW(check_stage_program(spec, s, stage_schedule(spec, s)));
      for (const Costs c : kCostSets) BOOST_CHECK_NO_THROW(simulate(spec, OpTimes::uniform(spec, c.f, c.bi, c.w)));
      // Uneven stages and transfer times change when things happen, not whether they can.
      OpTimes uneven = OpTimes::uniform(spec, 1.0, 1.5, 0.5);
      for (std::size_t v = 0; v < uneven.forward.size(); ++v) {
        uneven.forward[v] += 0.3 * static_cast<double>(v % 3);
        uneven.backward_weight[v] += 0.7 * static_cast<double>(v % 2);
        uneven.send_activation[v] = 0.1 * static_cast<double>(v + 1);
        uneven.send_gradient[v] = 0.2;
      }
      BOOST_CHECK_NO_THROW(simulate(spec, uneven));
    }
  }
}

// With the same per-op costs on every stage: 1F1B takes (M + P - 1)(F + B), ZB-H1
// M (F + Bi + W) + (P - 1) max(F, F + Bi - W), and ZB-H2, once M >= 2P - 1 (the paper's
// condition: enough warm-up forwards to reach the first Bi), M (F + Bi + W) + (P - 1) max(F, F + Bi - 2W).
// Within its own span stage s then idles (P - 1 - s) max(0, F + Bi - 2W): zero when F + Bi <= 2W,
// as with F = Bi = W: every stage works without a gap, and only the first forward's trip down the
// pipeline (P - 1) F, which no schedule avoids, separates the makespan from M (F + Bi + W).
BOOST_AUTO_TEST_CASE(zb_h2_makespan_and_bubble_match_the_closed_forms) {
  for (int p = 1; p <= 5; ++p) {
    for (int m = 2 * p - 1; m <= 12; ++m) {
      for (const Costs c : kCostSets) {
        BOOST_TEST_CONTEXT("P=" << p << " M=" << m << " F/Bi/W=" << c.f << "/" << c.bi << "/" << c.w) {
          const double work = m * (c.f + c.bi + c.w);
          const ScheduleSpec h2{ScheduleKind::ZeroBubbleH2, p, m, 1};
          const double h2_makespan = work + (p - 1) * std::max(c.f, c.f + c.bi - 2 * c.w);
          BOOST_TEST(makespan(h2, c) == h2_makespan, boost::test_tools::tolerance(1e-9));
          const auto idle = idle_within_span(h2, c);
          for (int s = 0; s < p; ++s)
            BOOST_TEST(idle[static_cast<std::size_t>(s)] == (p - 1 - s) * std::max(0.0, c.f + c.bi - 2 * c.w),
                       boost::test_tools::tolerance(1e-9));
          const double one_f_one_b = (m + p - 1) * (c.f + c.bi + c.w);
          const double h1 = work + (p - 1) * std::max(c.f, c.f + c.bi - c.w);
          BOOST_TEST(makespan({ScheduleKind::OneFOneB, p, m, 1}, c) == one_f_one_b, boost::test_tools::tolerance(1e-9));
          BOOST_TEST(makespan({ScheduleKind::ZeroBubbleH1, p, m, 1}, c) == h1, boost::test_tools::tolerance(1e-9));
          BOOST_TEST(h2_makespan <= h1 + 1e-9);
          if (p > 1 && c.bi > c.w) BOOST_TEST(h2_makespan < h1);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(zb_h2_with_equal_costs_has_no_gap_on_any_stage) {
  const ScheduleSpec spec{ScheduleKind::ZeroBubbleH2, 4, 7, 1};
  for (const double idle : idle_within_span(spec, {1.0, 1.0, 1.0})) BOOST_TEST(idle == 0.0);
  const double bubble = simulate(spec, OpTimes::uniform(spec, 1.0, 1.0, 1.0)).bubble_fraction;
  BOOST_TEST(bubble == 3.0 / (3.0 + 21.0), boost::test_tools::tolerance(1e-12));   // (P-1) F / makespan
}

// About twice 1F1B's activation memory: counting a micro-batch until its W, every stage holds up
// to min(2P - 1, M) (1F1B's stage 0 holds P); counting it until its Bi starts, stage s holds
// min(2(P - s) - 1, M), its warm-up forwards.
BOOST_AUTO_TEST_CASE(zb_h2_holds_2p_minus_1_micro_batches) {
  for (int p = 1; p <= 5; ++p) {
    for (int m = p; m <= 12; ++m) {
      const ScheduleSpec spec{ScheduleKind::ZeroBubbleH2, p, m, 1};
      BOOST_TEST_CONTEXT("P=" << p << " M=" << m) {
        for (int s = 0; s < p; ++s) {
          BOOST_TEST(peak(spec, s, HeldUntil::WeightGradientDone) == std::min(2 * p - 1, m));
          BOOST_TEST(peak(spec, s, HeldUntil::BackwardStarts) == std::min(2 * (p - s) - 1, m));
        }
        BOOST_TEST(peak({ScheduleKind::OneFOneB, p, m, 1}, 0, HeldUntil::WeightGradientDone) == p);
      }
    }
  }
}

// Per-chunk costs F, Bi, W: interleaved 1F1B takes V M (F + B) + (P - 1)(F + B); interleaved-zb
// V M (F + Bi + W) + (P - 1) max(F, F + Bi - W), less whenever W > 0.
BOOST_AUTO_TEST_CASE(interleaved_zb_bubble_is_below_interleaved_1f1b) {
  for (int p = 1; p <= 5; ++p) {
    for (int m = p; m <= 12; m += p) {
      for (int v : {2, 3}) {
        for (const Costs c : kCostSets) {
          BOOST_TEST_CONTEXT("P=" << p << " M=" << m << " V=" << v << " F/Bi/W=" << c.f << "/" << c.bi << "/" << c.w) {
            const double work = v * m * (c.f + c.bi + c.w);
            const ScheduleSpec zb{ScheduleKind::InterleavedZeroBubble, p, m, v};
            const ScheduleSpec interleaved{ScheduleKind::Interleaved, p, m, v};
            const double zb_makespan = work + (p - 1) * std::max(c.f, c.f + c.bi - c.w);
            const double interleaved_makespan = work + (p - 1) * (c.f + c.bi + c.w);
            BOOST_TEST(makespan(zb, c) == zb_makespan, boost::test_tools::tolerance(1e-9));
            BOOST_TEST(makespan(interleaved, c) == interleaved_makespan, boost::test_tools::tolerance(1e-9));
            const auto times = OpTimes::uniform(zb, c.f, c.bi, c.w);
            if (p > 1) BOOST_TEST(simulate(zb, times).bubble_fraction < simulate(interleaved, times).bubble_fraction);
          }
        }
      }
    }
  }
}

// Same forward and Bi order as interleaved 1F1B, so the same units wait for their backward; stage s
// keeps at most s more until their W.
BOOST_AUTO_TEST_CASE(interleaved_zb_holds_at_most_s_more_than_interleaved) {
  for (int p = 1; p <= 5; ++p) {
    for (int m = p; m <= 12; m += p) {
      for (int v : {2, 3}) {
        const ScheduleSpec zb{ScheduleKind::InterleavedZeroBubble, p, m, v};
        const ScheduleSpec interleaved{ScheduleKind::Interleaved, p, m, v};
        BOOST_TEST_CONTEXT("P=" << p << " M=" << m << " V=" << v) {
          for (int s = 0; s < p; ++s) {
            const int base = peak(interleaved, s, HeldUntil::WeightGradientDone);
            BOOST_TEST(peak(zb, s, HeldUntil::BackwardStarts) == base);
            BOOST_TEST(peak(zb, s, HeldUntil::WeightGradientDone) <= base + s);
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(zb_h1_and_zb_h2_against_the_authors_scheduler) {
  // Golden figures from sail-sg/zero-bubble-pipeline-parallelism 39f2c186a27580b7051eb51e0f651e1efd0a8170,
  // megatron/core/pipeline_parallel/zerobubble/scheduler/zb.py (its heuristic initial_solution, the
  // ZB-1P/ZB-2P search before the ILP) with F = B = W = 1 and memory limits of P and 2P - 1
  // micro-batches: the longest stage idles P - 1 units at P held (zb-h1) and none at 2P - 1 held
  // (zb-h2), for (P, M) = (2, 4), (2, 8), (3, 6), (4, 8), (4, 16), (5, 10), (6, 12), (8, 16);
  // tests/pipeline/reference_zero_bubble.py reproduces them.
  for (auto [p, m] : {std::pair{2, 4}, {2, 8}, {3, 6}, {4, 8}, {4, 16}, {5, 10}, {6, 12}, {8, 16}}) {
    BOOST_TEST_CONTEXT("P=" << p << " M=" << m) {
      const ScheduleSpec h1{ScheduleKind::ZeroBubbleH1, p, m, 1}, h2{ScheduleKind::ZeroBubbleH2, p, m, 1};
      const auto idle_h1 = idle_within_span(h1, {1.0, 1.0, 1.0});
      const auto idle_h2 = idle_within_span(h2, {1.0, 1.0, 1.0});
      BOOST_TEST(*std::max_element(idle_h1.begin(), idle_h1.end()) == p - 1.0);
      BOOST_TEST(*std::max_element(idle_h2.begin(), idle_h2.end()) == 0.0);
      for (int s = 0; s < p; ++s) {
        BOOST_TEST(peak(h1, s, HeldUntil::WeightGradientDone) <= p);
        BOOST_TEST(peak(h2, s, HeldUntil::WeightGradientDone) <= 2 * p - 1);
      }
      BOOST_TEST(peak(h1, 0, HeldUntil::WeightGradientDone) == p);
      BOOST_TEST(peak(h2, 0, HeldUntil::WeightGradientDone) == 2 * p - 1);
    }
  }
}

// Golden programs: the generators' output, checked by hand against the unit-time grid
// (format_grid) for the properties above: stage 0 of ZB-H2 warms up with 2P - 1 forwards, the last
// stage defers its W's to the tail; interleaved-zb runs W's s units late on stage s.
BOOST_AUTO_TEST_CASE(zb_h2_2_stages_3_micro_batches) {
  const std::vector<std::string> expected = {"F0 F1 F2 Bi0 W0 Bi1 W1 Bi2 W2 RG S",
                                             "F0 Bi0 F1 Bi1 F2 Bi2 W0 W1 W2 RG S"};
  BOOST_TEST(program_texts({ScheduleKind::ZeroBubbleH2, 2, 3, 1}) == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(zb_h2_3_stages_5_micro_batches) {
  const std::vector<std::string> expected = {"F0 F1 F2 F3 F4 Bi0 W0 Bi1 W1 Bi2 W2 Bi3 W3 Bi4 W4 RG S",
                                             "F0 F1 F2 Bi0 F3 Bi1 F4 Bi2 W0 Bi3 W1 Bi4 W2 W3 W4 RG S",
                                             "F0 Bi0 F1 Bi1 F2 Bi2 F3 Bi3 F4 Bi4 W0 W1 W2 W3 W4 RG S"};
  BOOST_TEST(program_texts({ScheduleKind::ZeroBubbleH2, 3, 5, 1}) == expected, boost::test_tools::per_element());
  BOOST_TEST(to_text(stage_schedule({ScheduleKind::ZeroBubbleH2, 3, 5, 1}, 1), true).substr(0, 31) ==
             "rA0 F0 sA0 rA1 F1 sA1 rA2 F2 sA");
}

BOOST_AUTO_TEST_CASE(interleaved_zb_2_stages_4_micro_batches_2_chunks) {
  const std::vector<std::string> expected = {
      "F0.0 F1.0 F0.1 F1.1 F2.0 Bi0.1 W0.1 F3.0 Bi1.1 W1.1 F2.1 Bi0.0 W0.0 F3.1 Bi1.0 W1.0 Bi2.1 W2.1 Bi3.1 W3.1 "
      "Bi2.0 W2.0 Bi3.0 W3.0 RG S",
      "F0.0 F1.0 F0.1 Bi0.1 F1.1 Bi1.1 W0.1 F2.0 Bi0.0 W1.1 F3.0 Bi1.0 W0.0 F2.1 Bi2.1 W1.0 F3.1 Bi3.1 W2.1 Bi2.0 "
      "W3.1 Bi3.0 W2.0 W3.0 RG S"};
  BOOST_TEST(program_texts({ScheduleKind::InterleavedZeroBubble, 2, 4, 2}) == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(text_round_trips) {
  for (const ScheduleSpec& spec : generated_specs()) {
    for (int s = 0; s < spec.stages; ++s) {
      const auto program = stage_schedule(spec, s);
      BOOST_TEST((from_text(to_text(program, true)) == program), describe(spec) << " stage " << s);
    }
  }
}

BOOST_AUTO_TEST_CASE(bad_layouts_are_one_line_input_errors) {
  auto message = [](const ScheduleSpec& spec) -> std::string {
    try {
      stage_schedule(spec, 0);
    } catch (const pw::InputError& e) {
      return e.what();
    }
    return "";
  };
  BOOST_TEST(message({ScheduleKind::ZeroBubbleH2, 4, 3, 1}) ==
             "zb-h2 schedule: 3 micro-batches for 4 stages; it needs at least one per stage (micro-batches >= stages), "
             "gpipe takes fewer");
  BOOST_TEST(message({ScheduleKind::ZeroBubbleH2, 2, 4, 2}).find("it takes exactly 1") != std::string::npos);
  BOOST_TEST(message({ScheduleKind::InterleavedZeroBubble, 2, 4, 1}).find("it needs at least 2") != std::string::npos);
  BOOST_TEST(message({ScheduleKind::InterleavedZeroBubble, 2, 3, 2}) ==
             "interleaved-zb schedule: 3 micro-batches is not a multiple of 2 stages");
  for (const auto& m : {message({ScheduleKind::ZeroBubbleH2, 4, 3, 1}), message({ScheduleKind::InterleavedZeroBubble, 2, 3, 2})})
    BOOST_TEST(m.find('\n') == std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()

// The op times a planner gives a schedule from its pieces' estimates: a split backward takes the
// profiled halves where the profile has them (their sum is more than the fused backward), half of
// the backward each where it has none, and a recomputing piece's re-run forward in its input half;
// a fused backward is the backward whatever the halves.
BOOST_AUTO_TEST_CASE(split_backwards_take_the_profiled_halves) {
  pw::partition::StageEstimate measured, unmeasured, recomputing;
  measured.forward_seconds = unmeasured.forward_seconds = recomputing.forward_seconds = 1.0;
  measured.backward_seconds = unmeasured.backward_seconds = 2.0;
  measured.input_half_seconds = recomputing.input_half_seconds = 1.5;
  measured.weight_half_seconds = recomputing.weight_half_seconds = 0.75;
  recomputing.recomputes = true;
  recomputing.backward_seconds = 3.0;   // the fused backward and the re-run forward
  const std::vector<pw::partition::StageEstimate> pieces{measured, unmeasured, recomputing};
  const auto split = op_times({ScheduleKind::ZeroBubbleH1, 3, 3, 1}, pieces);
  BOOST_TEST(split.backward_input == (std::vector<double>{1.5, 1.0, 2.5}), boost::test_tools::per_element());
  BOOST_TEST(split.backward_weight == (std::vector<double>{0.75, 1.0, 0.75}), boost::test_tools::per_element());
  const auto fused = op_times({ScheduleKind::OneFOneB, 3, 3, 1}, pieces);
  BOOST_TEST(fused.backward_input == (std::vector<double>{2.0, 2.0, 3.0}), boost::test_tools::per_element());
  BOOST_TEST(fused.backward_weight == (std::vector<double>{0.0, 0.0, 0.0}), boost::test_tools::per_element());
}

