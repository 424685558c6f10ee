// The simulator: bubble fractions against the closed forms, timing with transfers, deadlock and
// malformed-program reports, and the grid printer.
#include <boost/test/unit_test.hpp>

#include <cmath>

#include "core/error.h"
#include "pipeline/simulator.h"

using namespace pw::pipeline;

namespace {

// Equal op times: F = 1, B = 2 split as Bi = 1 + W = 1.
double bubble(ScheduleKind kind, int stages, int micro_batches, int chunks = 1) {
  const ScheduleSpec spec{kind, stages, micro_batches, chunks};
  return simulate(spec, OpTimes::uniform(spec, 1.0, 1.0, 1.0)).bubble_fraction;
}

std::vector<std::vector<Instruction>> programs_from_text(const std::vector<std::string>& texts) {
  std::vector<std::vector<Instruction>> programs;
  for (const auto& t : texts) programs.push_back(from_text(t));
  return programs;
}

std::string simulation_error(const ScheduleSpec& spec, const std::vector<std::string>& texts) {
  try {
    simulate(spec, programs_from_text(texts), OpTimes::uniform(spec, 1.0, 1.0, 1.0));
  } catch (const pw::Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

BOOST_AUTO_TEST_SUITE(simulator)

BOOST_AUTO_TEST_CASE(gpipe_and_1f1b_bubble_is_p_minus_1_over_m_plus_p_minus_1) {
  for (int p = 1; p <= 4; ++p) {
    for (int m = p; m <= 8; ++m) {
      const double expected = static_cast<double>(p - 1) / (m + p - 1);
      BOOST_TEST(std::abs(bubble(ScheduleKind::GPipe, p, m) - expected) < 1e-9, "gpipe P=" << p << " M=" << m);
      BOOST_TEST(std::abs(bubble(ScheduleKind::OneFOneB, p, m) - expected) < 1e-9, "1f1b P=" << p << " M=" << m);
    }
  }
  BOOST_TEST(std::abs(bubble(ScheduleKind::GPipe, 4, 1) - 3.0 / 4.0) < 1e-9);   // M < P: mostly bubble
}

// Interleaving divides the bubble by V: (P - 1) / (V M + P - 1) with per-chunk op times.
// ZB-H1 leaves (P - 1) (F + Bi - W) = P - 1 of idle per stage: (P - 1) / (3 M + P - 1).
BOOST_AUTO_TEST_CASE(interleaved_and_zero_bubble_shrink_the_bubble) {
  for (int p = 2; p <= 4; ++p) {
    for (int m = p; m <= 8; m += p) {
      const double one_f_one_b = bubble(ScheduleKind::OneFOneB, p, m);
      const double interleaved2 = bubble(ScheduleKind::Interleaved, p, m, 2);
      const double interleaved3 = bubble(ScheduleKind::Interleaved, p, m, 3);
      const double zero_bubble = bubble(ScheduleKind::ZeroBubbleH1, p, m);
      BOOST_TEST_CONTEXT("P=" << p << " M=" << m) {
        BOOST_TEST(interleaved2 < one_f_one_b);
        BOOST_TEST(interleaved3 < interleaved2);
        BOOST_TEST(zero_bubble < interleaved2);
        BOOST_TEST(std::abs(interleaved2 - (p - 1.0) / (2 * m + p - 1)) < 1e-9);
        BOOST_TEST(std::abs(interleaved3 - (p - 1.0) / (3 * m + p - 1)) < 1e-9);
        BOOST_TEST(std::abs(zero_bubble - (p - 1.0) / (3 * m + p - 1)) < 1e-9);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(result_fields_for_1f1b_2_stages_4_micro_batches) {
  const ScheduleSpec spec{ScheduleKind::OneFOneB, 2, 4, 1};
  const SimulationResult r = simulate(spec, OpTimes::uniform(spec, 1.0, 1.0, 1.0));
  BOOST_TEST(r.makespan == 15.0);
  BOOST_TEST(r.stage_busy == (std::vector<double>{12.0, 12.0}), boost::test_tools::per_element());
  BOOST_TEST(r.stage_busy_fraction == (std::vector<double>{0.8, 0.8}), boost::test_tools::per_element());
  BOOST_TEST(r.bubble_fraction == 0.2, boost::test_tools::tolerance(1e-12));
  BOOST_REQUIRE(r.timeline.size() == 2);
  BOOST_TEST(r.timeline[0].size() == stage_schedule(spec, 0).size());
  // Stage 0 waits 2 units for the first gradient: its rG0 spans the wait.
  const TimedOp& wait = r.timeline[0][4];
  BOOST_TEST((wait.instruction == Instruction{OpType::RecvGradient, 0, 0}));
  BOOST_TEST(wait.start == 2.0);
  BOOST_TEST(wait.end == 4.0);
}

// Hand-computed: F0 on stage 0 [0, 1], activation arrives 1.5, F0 + B0 on stage 1 [1.5, 4.5],
// gradient arrives 4.75, B0 on stage 0 [4.75, 6.75], then a 0.5 optimizer step on each stage.
BOOST_AUTO_TEST_CASE(transfers_delay_the_receiver_and_steps_count_as_busy) {
  const ScheduleSpec spec{ScheduleKind::GPipe, 2, 1, 1};
  OpTimes times = OpTimes::uniform(spec, 1.0, 1.5, 0.5);
  times.send_activation = {0.5, 0.0};
  times.send_gradient = {0.0, 0.25};
  times.optimizer_step = 0.5;
  const SimulationResult r = simulate(spec, times);
  BOOST_TEST(r.makespan == 7.25);
  BOOST_TEST(r.stage_busy == (std::vector<double>{3.5, 3.5}), boost::test_tools::per_element());
  BOOST_TEST(r.bubble_fraction == 1.0 - 7.0 / 14.5, boost::test_tools::tolerance(1e-12));
  const auto& stage1 = r.timeline[1];   // rA0 F0 B0 sG0 RG S
  BOOST_TEST(stage1[0].end == 1.5);
  BOOST_TEST(stage1[2].start == 2.5);
  BOOST_TEST(stage1[2].end == 4.5);
  BOOST_TEST(r.timeline[0][2].end == 4.75);   // stage 0: F0 sA0 rG0 ...
}

BOOST_AUTO_TEST_CASE(deadlock_names_every_blocked_stage_and_what_it_waits_for) {
  // Stage 0 waits for the gradient before sending the activation stage 1 needs to produce it.
  const std::string msg = simulation_error({ScheduleKind::GPipe, 2, 1, 1},
                                           {"rG0 F0 sA0 B0 RG S", "rA0 F0 B0 sG0 RG S"});
  BOOST_TEST_MESSAGE(msg);
  BOOST_TEST(contains(msg, "deadlocks"), msg);
  BOOST_TEST(contains(msg, "stage 0 waits at instruction 0 'rG0' for the gradient of micro-batch 0"), msg);
  BOOST_TEST(contains(msg, "stage 1 sends it at instruction 3 'sG0' but is at instruction 0 'rA0'"), msg);
  BOOST_TEST(contains(msg, "stage 1 waits at instruction 0 'rA0' for the activation of micro-batch 0"), msg);
  BOOST_TEST(contains(msg, "stage 0 sends it at instruction 2 'sA0' but is at instruction 0 'rG0'"), msg);
}

BOOST_AUTO_TEST_CASE(three_stage_cycle_through_wrong_micro_batch_order) {
  // Stage 2 insists on micro-batch 1 first; stage 1 only forwards 1 after 0's gradient is back.
  const std::string msg = simulation_error(
      {ScheduleKind::OneFOneB, 3, 3, 1},
      {"F0 sA0 F1 sA1 F2 sA2 rG0 B0 rG1 B1 rG2 B2 RG S",
       "rA0 F0 sA0 rG0 B0 sG0 rA1 F1 sA1 rG1 B1 sG1 rA2 F2 sA2 rG2 B2 sG2 RG S",
       "rA1 F1 B1 sG1 rA0 F0 B0 sG0 rA2 F2 B2 sG2 RG S"});
  BOOST_TEST(contains(msg, "stage 1 waits at instruction 3 'rG0'"), msg);
  BOOST_TEST(contains(msg, "stage 2 waits at instruction 0 'rA1'"), msg);
  BOOST_TEST(contains(msg, "stage 0 waits at instruction 6 'rG0'"), msg);   // blocked behind the cycle
}

BOOST_AUTO_TEST_CASE(receive_without_any_send_is_reported) {
  const std::string msg = simulation_error({ScheduleKind::GPipe, 2, 1, 1}, {"F0 rG0 B0 RG S", "rA0 F0 B0 sG0 RG S"});
  BOOST_TEST(contains(msg, "stage 1 waits at instruction 0 'rA0'"), msg);
  BOOST_TEST(contains(msg, "stage 0 never sends it"), msg);
}

BOOST_AUTO_TEST_CASE(malformed_programs_are_rejected_with_the_instruction) {
  const ScheduleSpec spec{ScheduleKind::GPipe, 2, 1, 1};
  BOOST_TEST(contains(simulation_error(spec, {"F0 sA0 rG0 B0 RG S", "rA0 F0 B0 sG0 sG0 RG S"}),
                      "stage 1 instruction 4 'sG0' sends a gradient that virtual stage 0 (stage 0) never receives"));
  BOOST_TEST(contains(simulation_error(spec, {"F0 sA0 rG0 B0 RG S", "rA0 B0 sG0 RG S"}),
                      "stage 1 instruction 1 'B0': backward before its forward"));
  BOOST_TEST(contains(simulation_error(spec, {"F0 sA0 rG0 B0 RG S", "rA0 F0 sA0 B0 sG0 RG S"}),
                      "virtual stage 1 has no next virtual stage"));
  BOOST_TEST(contains(simulation_error(spec, {"F0 sA0 rG0 RG S", "rA0 F0 B0 sG0 RG S"}),
                      "gradients are not final: micro-batch 0 chunk 0 has no complete backward"));
  BOOST_TEST(contains(simulation_error(spec, {"F0 sA0 rG0 B0 RG S", "rA0 F0 W0 sG0 RG S"}),
                      "weight gradient before its input gradient"));
  BOOST_TEST(contains(simulation_error(spec, {"F0 sA0 rG0 B0 RG S", "rA0 F3 B0 sG0 RG S"}), "out of range"));
  BOOST_TEST(contains(simulation_error(spec, {"F0 sA0 rG0 B0 S", "rA0 F0 B0 sG0 RG S"}), "ReduceGrads"));
  BOOST_TEST(contains(simulation_error(spec, {"F0 sA0 rG0 B0 RG S"}), "1 programs for 2 stages"));
}

// Callers that map stages to their source (schedule files) get the stage at fault apart.
BOOST_AUTO_TEST_CASE(errors_carry_the_stage_at_fault) {
  const ScheduleSpec spec{ScheduleKind::GPipe, 2, 1, 1};
  const OpTimes times = OpTimes::uniform(spec, 1.0, 1.0, 1.0);
  try {
    simulate(spec, programs_from_text({"F0 sA0 rG0 B0 RG S", "rA0 B0 sG0 RG S"}), times);
    BOOST_ERROR("expected ScheduleError");
  } catch (const ScheduleError& e) {
    BOOST_TEST(e.stage() == 1);
    BOOST_TEST(e.detail() == "stage 1 instruction 1 'B0': backward before its forward");
    BOOST_TEST(std::string(e.what()) == "schedule gpipe: " + e.detail());
  }
  try {
    simulate(spec, programs_from_text({"rG0 F0 sA0 B0 RG S", "rA0 F0 B0 sG0 RG S"}), times);
    BOOST_ERROR("expected ScheduleError");
  } catch (const ScheduleError& e) {
    BOOST_TEST(e.stage() == 0);   // the first stage blocked
    BOOST_TEST(e.detail().starts_with("deadlocks (2 stages, 1 micro-batches, 1 chunks): stage 0 waits"), e.detail());
  }
}

BOOST_AUTO_TEST_CASE(recompute_costs_a_forward) {
  const ScheduleSpec spec{ScheduleKind::GPipe, 1, 1, 1};
  const auto r = simulate(spec, {from_text("F0 R0 B0 RG S")}, OpTimes::uniform(spec, 1.0, 1.0, 1.0));
  BOOST_TEST(r.makespan == 4.0);
  BOOST_TEST(r.bubble_fraction == 0.0);
}

BOOST_AUTO_TEST_CASE(grid_of_1f1b_2_stages_4_micro_batches) {
  const std::string expected =
      "1f1b: 2 stages, 4 micro-batches; one column per time unit, F = 1, B = 2 (Bi = 1 + W = 1)\n"
      "time    0  1  2  3  4  5  6  7  8  9  10 11 12 13 14\n"
      "stage 0 F0 F1 .  .  B0 B0 F2 B1 B1 F3 B2 B2 .  B3 B3\n"
      "stage 1 .  F0 B0 B0 F1 B1 B1 F2 B2 B2 F3 B3 B3 .  .\n"
      "makespan 15, bubble 20.0%\n";
  BOOST_TEST(format_grid({ScheduleKind::OneFOneB, 2, 4, 1}) == expected);
}

// The ZB-H1 picture of the paper (Figure 3, P = 4): every stage ends at the same time.
BOOST_AUTO_TEST_CASE(grid_of_zero_bubble_h1_4_stages_4_micro_batches) {
  const std::string expected =
      "zb-h1: 4 stages, 4 micro-batches; one column per time unit, F = 1, B = 2 (Bi = 1 + W = 1)\n"
      "time    0   1   2   3   4   5   6   7   8   9   10  11  12  13  14\n"
      "stage 0 F0  F1  F2  F3  .   .   .   Bi0 W0  Bi1 W1  Bi2 W2  Bi3 W3\n"
      "stage 1 .   F0  F1  F2  .   .   Bi0 F3  Bi1 W0  Bi2 W1  Bi3 W2  W3\n"
      "stage 2 .   .   F0  F1  .   Bi0 F2  Bi1 F3  Bi2 W0  Bi3 W1  W2  W3\n"
      "stage 3 .   .   .   F0  Bi0 F1  Bi1 F2  Bi2 F3  Bi3 W0  W1  W2  W3\n"
      "makespan 15, bubble 20.0%\n";
  BOOST_TEST(format_grid({ScheduleKind::ZeroBubbleH1, 4, 4, 1}) == expected);
}

BOOST_AUTO_TEST_CASE(grid_of_interleaved_shows_chunks) {
  const std::string grid = format_grid({ScheduleKind::Interleaved, 2, 4, 2});
  BOOST_TEST(contains(grid, "stage 0 F0.0 F1.0 F0.1 F1.1 F2.0 .    B0.1 B0.1 F3.0"), grid);
  BOOST_TEST(contains(grid, "stage 1 .    F0.0 F1.0 F0.1 B0.1 B0.1 F1.1"), grid);
  BOOST_TEST(contains(grid, "makespan 27, bubble 11.1%"), grid);
}

BOOST_AUTO_TEST_SUITE_END()
