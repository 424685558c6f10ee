// V placement (zb-v, v-half, v-min, dualpipev): stage s holds pieces s and 2P-1-s, so the loss is on
// stage 0, the turn from piece P-1 to piece P stays on stage P-1 (a message to itself that costs
// no transfer), and programs that get the turn's order wrong are refused.
#include <boost/test/unit_test.hpp>

#include "core/error.h"
#include "pipeline/schedule_file.h"
#include "pipeline/simulator.h"

using namespace pw::pipeline;

namespace {

const ScheduleSpec kV22{ScheduleKind::ZeroBubbleV, 2, 2, 2};

// All forwards down and back up the V, then all backwards (GPipe's order on V placement).
const std::string kStage0 = "F0.0 sA0.0 F1.0 sA1.0 rA0.1 F0.1 rA1.1 F1.1 B0.1 sG0.1 B1.1 sG1.1 rG0.0 B0.0 rG1.0 B1.0 RG S";
const std::string kStage1 =
    "rA0.0 F0.0 sA0.0 rA1.0 F1.0 sA1.0 rA0.1 F0.1 sA0.1 rA1.1 F1.1 sA1.1 "
    "rG0.1 B0.1 sG0.1 rG1.1 B1.1 sG1.1 rG0.0 B0.0 sG0.0 rG1.0 B1.0 sG1.0 RG S";

std::string error_of(const std::string& stage0, const std::string& stage1) {
  try {
    parse_schedule_text(stage0 + "\n" + stage1 + "\n", kV22, "v.sched");
  } catch (const pw::InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(v_placement)

BOOST_AUTO_TEST_CASE(pieces_and_the_loss_stage_follow_the_v) {
  BOOST_TEST(virtual_stage(kV22, 0, 1) == 3);
  BOOST_TEST(virtual_stage(kV22, 1, 1) == 2);
  BOOST_TEST(loss_stage(kV22) == 0);
  BOOST_TEST(loss_stage({ScheduleKind::Interleaved, 2, 2, 2}) == 1);
  BOOST_TEST(loss_stage({ScheduleKind::OneFOneB, 3, 3, 1}) == 2);
  BOOST_TEST(default_chunks(ScheduleKind::ZeroBubbleV) == 2);
  BOOST_TEST(default_chunks(ScheduleKind::ZeroBubbleH2) == 1);
}

BOOST_AUTO_TEST_CASE(a_v_schedule_takes_exactly_two_chunks) {
  try {
    validate({ScheduleKind::ZeroBubbleV, 2, 4, 3});
    BOOST_FAIL("three chunks accepted");
  } catch (const pw::InputError& e) {
    BOOST_TEST(std::string(e.what()) ==
               "zb-v schedule: 3 chunks per stage; a V schedule takes exactly 2 (pieces s and 2P-1-s)");
  }
}

BOOST_AUTO_TEST_CASE(a_hand_written_v_program_runs_and_its_turn_costs_no_transfer) {
  const auto programs = parse_schedule_text(kStage0 + "\n" + kStage1 + "\n", kV22, "v.sched");
  BOOST_REQUIRE_EQUAL(programs.size(), 2u);
  // F = 1, B = 2 and every transfer 10: the turn on stage 1 (pieces 1 -> 2) crosses no link, so the
  // forward path is F F(+10) F F(+10): pieces 0 | 1 2 | 3.
  OpTimes times = OpTimes::uniform(kV22, 1.0, 2.0, 0.0);
  times.send_activation.assign(4, 10.0);
  times.send_gradient.assign(4, 10.0);
  const auto r = simulate(kV22, programs, times);
  // Stage 1 runs F0.0 at 11..12, F1.0 at 12..13, then piece 2's F0.1 at 13..14 with no wait for the
  // turn; micro-batch 0 reaches piece 3 on stage 0 at 24 and its loss forward ends at 25.
  double last_piece_forward_end = 0.0;
  for (const auto& op : r.timeline[0])
    if (op.instruction == Instruction{OpType::Forward, 0, 1}) last_piece_forward_end = op.end;
  BOOST_TEST(last_piece_forward_end == 25.0);
}

BOOST_AUTO_TEST_CASE(receiving_the_turn_before_sending_it_deadlocks) {
  // Stage 1 waits for piece 2's input before piece 1 has sent it to itself.
  const std::string stage1 =
      "rA0.0 F0.0 rA0.1 sA0.0 rA1.0 F1.0 sA1.0 F0.1 sA0.1 rA1.1 F1.1 sA1.1 "
      "rG0.1 B0.1 sG0.1 rG1.1 B1.1 sG1.1 rG0.0 B0.0 sG0.0 rG1.0 B1.0 sG1.0 RG S";
  const std::string e = error_of(kStage0, stage1);
  BOOST_TEST(e.find("deadlocks") != std::string::npos, e);
  BOOST_TEST(e.find("stage 1 waits at instruction 2 'rA0.1' for the activation of micro-batch 0 chunk 1 (stage 1 "
                    "sends it at instruction 3 'sA0.0'") != std::string::npos,
             e);
}

BOOST_AUTO_TEST_SUITE_END()
