// with_recompute: explicit Recompute instructions right before each backward of a recomputing
// stage; every default program passes the per-stage check.
#include <boost/test/unit_test.hpp>

#include "pipeline/program_check.h"
#include "pipeline/recompute.h"

using namespace pw::pipeline;

namespace {

std::string recompute_text(const ScheduleSpec& spec, RecomputeMode mode, int stage) {
  return to_text(with_recompute(stage_schedule(spec, stage), mode, stage, spec.stages), /*with_communication=*/true);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(recompute_program)

// 1F1B P = 2, M = 4 (golden in test_schedule_golden.cpp) with R(k) inserted before each B(k).
BOOST_AUTO_TEST_CASE(one_f_one_b_2_stages_4_micro_batches) {
  const ScheduleSpec spec{ScheduleKind::OneFOneB, 2, 4, 1};
  const std::string stage0 = "F0 sA0 F1 sA1 rG0 B0 F2 sA2 rG1 B1 F3 sA3 rG2 B2 rG3 B3 RG S";
  const std::string stage1 = "rA0 F0 B0 sG0 rA1 F1 B1 sG1 rA2 F2 B2 sG2 rA3 F3 B3 sG3 RG S";
  const std::string stage0_recomputed = "F0 sA0 F1 sA1 rG0 R0 B0 F2 sA2 rG1 R1 B1 F3 sA3 rG2 R2 B2 rG3 R3 B3 RG S";
  const std::string stage1_recomputed = "rA0 F0 R0 B0 sG0 rA1 F1 R1 B1 sG1 rA2 F2 R2 B2 sG2 rA3 F3 R3 B3 sG3 RG S";
  BOOST_TEST(recompute_text(spec, RecomputeMode::All, 0) == stage0_recomputed);
  BOOST_TEST(recompute_text(spec, RecomputeMode::All, 1) == stage1_recomputed);
  BOOST_TEST(recompute_text(spec, RecomputeMode::ExceptLast, 0) == stage0_recomputed);
  BOOST_TEST(recompute_text(spec, RecomputeMode::ExceptLast, 1) == stage1);
  BOOST_TEST(recompute_text(spec, RecomputeMode::None, 0) == stage0);
  BOOST_TEST(recompute_text(spec, RecomputeMode::None, 1) == stage1);
}

// ZB-H1 recomputes before the input half; the weight half reuses the rebuilt context.
BOOST_AUTO_TEST_CASE(zero_bubble_recomputes_before_the_input_half) {
  const ScheduleSpec spec{ScheduleKind::ZeroBubbleH1, 2, 2, 1};
  BOOST_TEST(to_text(with_recompute(stage_schedule(spec, 1), RecomputeMode::All, 1, 2)) ==
             "F0 R0 Bi0 F1 R1 Bi1 W0 W1 RG S");
}

BOOST_AUTO_TEST_CASE(interleaved_recomputes_each_chunk) {
  const ScheduleSpec spec{ScheduleKind::Interleaved, 2, 2, 2};
  BOOST_TEST(to_text(stage_schedule(spec, 1)) == "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 B0.0 B1.0 RG S");
  BOOST_TEST(to_text(with_recompute(stage_schedule(spec, 1), RecomputeMode::ExceptLast, 1, 2)) ==
             "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 B0.0 B1.0 RG S");
  BOOST_TEST(to_text(with_recompute(stage_schedule(spec, 0), RecomputeMode::ExceptLast, 0, 2)) ==
             "F0.0 F1.0 F0.1 F1.1 R0.1 B0.1 R1.1 B1.1 R0.0 B0.0 R1.0 B1.0 RG S");
}

BOOST_AUTO_TEST_CASE(applying_it_twice_changes_nothing) {
  const ScheduleSpec spec{ScheduleKind::OneFOneB, 3, 4, 1};
  const auto once = with_recompute(stage_schedule(spec, 0), RecomputeMode::All, 0, 3);
  BOOST_TEST((with_recompute(once, RecomputeMode::All, 0, 3) == once));
  // A hand-placed Recompute is kept where it is, and the other backwards get theirs.
  const auto partial = from_text("F0 F1 R1 B0 B1 RG S");
  BOOST_TEST(to_text(with_recompute(partial, RecomputeMode::All, 0, 1)) == "F0 F1 R1 R0 B0 B1 RG S");
}

BOOST_AUTO_TEST_CASE(every_default_program_passes_the_stage_check) {
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved,
                            ScheduleKind::ZeroBubbleH1}) {
    for (RecomputeMode mode : {RecomputeMode::None, RecomputeMode::All, RecomputeMode::ExceptLast}) {
      for (int stages = 1; stages <= 4; ++stages) {
        const ScheduleSpec spec{kind, stages, 2 * stages, kind == ScheduleKind::Interleaved ? 2 : 1};
        for (int s = 0; s < stages; ++s)
          BOOST_CHECK_NO_THROW(check_stage_program(spec, s, default_program(spec, s, mode)));
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
