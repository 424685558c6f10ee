// Golden schedules: small (P, M) of every kind written out by hand in the compact text form.
// How each was derived is noted beside it; none is a pasted output.
#include <boost/test/unit_test.hpp>

#include "core/error.h"
#include "pipeline/schedule.h"

using namespace pw::pipeline;

namespace {

std::string compute_text(ScheduleKind kind, int stages, int micro_batches, int stage, int chunks = 1) {
  return to_text(stage_schedule({kind, stages, micro_batches, chunks}, stage));
}

std::string full_text(ScheduleKind kind, int stages, int micro_batches, int stage, int chunks = 1) {
  return to_text(stage_schedule({kind, stages, micro_batches, chunks}, stage), /*with_communication=*/true);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(schedule_golden)

// Fill-drain: all forwards, then the backwards in micro-batch order (as torch.distributed.pipelining).
BOOST_AUTO_TEST_CASE(gpipe_2_stages_2_micro_batches) {
  BOOST_TEST(compute_text(ScheduleKind::GPipe, 2, 2, 0) == "F0 F1 B0 B1 RG S");
  BOOST_TEST(compute_text(ScheduleKind::GPipe, 2, 2, 1) == "F0 F1 B0 B1 RG S");
  BOOST_TEST(full_text(ScheduleKind::GPipe, 2, 2, 0) == "F0 sA0 F1 sA1 rG0 B0 rG1 B1 RG S");
  BOOST_TEST(full_text(ScheduleKind::GPipe, 2, 2, 1) == "rA0 F0 rA1 F1 B0 sG0 B1 sG1 RG S");
}

// GPipe takes fewer micro-batches than stages.
BOOST_AUTO_TEST_CASE(gpipe_3_stages_1_micro_batch_middle_stage) {
  BOOST_TEST(full_text(ScheduleKind::GPipe, 3, 1, 1) == "rA0 F0 sA0 rG0 B0 sG0 RG S");
}

// PipeDream-Flush: stage s warms up with P - s - 1 forwards, then alternates F(w + i), B(i).
BOOST_AUTO_TEST_CASE(one_f_one_b_2_stages_4_micro_batches) {
  BOOST_TEST(compute_text(ScheduleKind::OneFOneB, 2, 4, 0) == "F0 F1 B0 F2 B1 F3 B2 B3 RG S");
  BOOST_TEST(compute_text(ScheduleKind::OneFOneB, 2, 4, 1) == "F0 B0 F1 B1 F2 B2 F3 B3 RG S");
  BOOST_TEST(full_text(ScheduleKind::OneFOneB, 2, 4, 0) ==
             "F0 sA0 F1 sA1 rG0 B0 F2 sA2 rG1 B1 F3 sA3 rG2 B2 rG3 B3 RG S");
  BOOST_TEST(full_text(ScheduleKind::OneFOneB, 2, 4, 1) ==
             "rA0 F0 B0 sG0 rA1 F1 B1 sG1 rA2 F2 B2 sG2 rA3 F3 B3 sG3 RG S");
}

// The staircase of the PipeDream-Flush / Megatron figure: warm-ups of 3, 2, 1, 0 forwards.
BOOST_AUTO_TEST_CASE(one_f_one_b_4_stages_4_micro_batches) {
  BOOST_TEST(compute_text(ScheduleKind::OneFOneB, 4, 4, 0) == "F0 F1 F2 F3 B0 B1 B2 B3 RG S");
  BOOST_TEST(compute_text(ScheduleKind::OneFOneB, 4, 4, 1) == "F0 F1 F2 B0 F3 B1 B2 B3 RG S");
  BOOST_TEST(compute_text(ScheduleKind::OneFOneB, 4, 4, 2) == "F0 F1 B0 F2 B1 F3 B2 B3 RG S");
  BOOST_TEST(compute_text(ScheduleKind::OneFOneB, 4, 4, 3) == "F0 B0 F1 B1 F2 B2 F3 B3 RG S");
  BOOST_TEST(full_text(ScheduleKind::OneFOneB, 4, 4, 1) ==
             "rA0 F0 sA0 rA1 F1 sA1 rA2 F2 sA2 rG0 B0 sG0 rA3 F3 sA3 rG1 B1 sG1 rG2 B2 sG2 rG3 B3 sG3 RG S");
}

// Megatron-LM interleaving, P = 2, V = 2: virtual stages 0 = s0.c0, 1 = s1.c0, 2 = s0.c1, 3 = s1.c1.
// Work units in groups of P micro-batches: forwards (0.0 1.0 0.1 1.1 2.0 3.0 2.1 3.1), backwards the
// same with chunks reversed (0.1 1.1 0.0 1.0 2.1 3.1 2.0 3.0). Warm-up 2 (P - s - 1) + (V - 1) P:
// 4 units on stage 0, 2 on stage 1; then forward k + warm-up alternates with backward k.
BOOST_AUTO_TEST_CASE(interleaved_2_stages_4_micro_batches_2_chunks) {
  BOOST_TEST(compute_text(ScheduleKind::Interleaved, 2, 4, 0, 2) ==
             "F0.0 F1.0 F0.1 F1.1 F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 B2.1 B3.1 B2.0 B3.0 RG S");
  BOOST_TEST(compute_text(ScheduleKind::Interleaved, 2, 4, 1, 2) ==
             "F0.0 F1.0 F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 B2.0 B3.0 RG S");
  // Stage 0 chunk 0 is the first virtual stage (no rA, no sG); its chunk 1 receives from stage 1.
  BOOST_TEST(full_text(ScheduleKind::Interleaved, 2, 4, 0, 2) ==
             "F0.0 sA0.0 F1.0 sA1.0 rA0.1 F0.1 sA0.1 rA1.1 F1.1 sA1.1 F2.0 sA2.0 rG0.1 B0.1 sG0.1 "
             "F3.0 sA3.0 rG1.1 B1.1 sG1.1 rA2.1 F2.1 sA2.1 rG0.0 B0.0 rA3.1 F3.1 sA3.1 rG1.0 B1.0 "
             "rG2.1 B2.1 sG2.1 rG3.1 B3.1 sG3.1 rG2.0 B2.0 rG3.0 B3.0 RG S");
  // Stage 1 chunk 1 is the last virtual stage: it neither sends activations nor receives gradients.
  BOOST_TEST(full_text(ScheduleKind::Interleaved, 2, 4, 1, 2) ==
             "rA0.0 F0.0 sA0.0 rA1.0 F1.0 sA1.0 rA0.1 F0.1 B0.1 sG0.1 rA1.1 F1.1 B1.1 sG1.1 "
             "rA2.0 F2.0 sA2.0 rG0.0 B0.0 sG0.0 rA3.0 F3.0 sA3.0 rG1.0 B1.0 sG1.0 "
             "rA2.1 F2.1 B2.1 sG2.1 rA3.1 F3.1 B3.1 sG3.1 rG2.0 B2.0 sG2.0 rG3.0 B3.0 sG3.0 RG S");
}

// ZB-H1: 1F1B's order with B split into Bi (in B's place) and W; stage s runs W(k) after Bi(k + s),
// so stage 0 is plain F Bi W and the last stage holds P micro-batches like stage 0 does in 1F1B.
BOOST_AUTO_TEST_CASE(zero_bubble_h1_2_stages_4_micro_batches) {
  BOOST_TEST(compute_text(ScheduleKind::ZeroBubbleH1, 2, 4, 0) == "F0 F1 Bi0 W0 F2 Bi1 W1 F3 Bi2 W2 Bi3 W3 RG S");
  BOOST_TEST(compute_text(ScheduleKind::ZeroBubbleH1, 2, 4, 1) == "F0 Bi0 F1 Bi1 W0 F2 Bi2 W1 F3 Bi3 W2 W3 RG S");
  BOOST_TEST(full_text(ScheduleKind::ZeroBubbleH1, 2, 4, 1) ==
             "rA0 F0 Bi0 sG0 rA1 F1 Bi1 sG1 W0 rA2 F2 Bi2 sG2 W1 rA3 F3 Bi3 sG3 W2 W3 RG S");
}

// The paper's Figure 3 shape for P = 4: the last stage delays its W's by 3.
BOOST_AUTO_TEST_CASE(zero_bubble_h1_4_stages_8_micro_batches) {
  BOOST_TEST(compute_text(ScheduleKind::ZeroBubbleH1, 4, 8, 0) ==
             "F0 F1 F2 F3 Bi0 W0 F4 Bi1 W1 F5 Bi2 W2 F6 Bi3 W3 F7 Bi4 W4 Bi5 W5 Bi6 W6 Bi7 W7 RG S");
  BOOST_TEST(compute_text(ScheduleKind::ZeroBubbleH1, 4, 8, 3) ==
             "F0 Bi0 F1 Bi1 F2 Bi2 F3 Bi3 W0 F4 Bi4 W1 F5 Bi5 W2 F6 Bi6 W3 F7 Bi7 W4 W5 W6 W7 RG S");
}

BOOST_AUTO_TEST_CASE(text_round_trips_every_generated_program) {
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved,
                            ScheduleKind::ZeroBubbleH1}) {
    const ScheduleSpec spec{kind, 3, 6, kind == ScheduleKind::Interleaved ? 2 : 1};
    for (int s = 0; s < spec.stages; ++s) {
      const auto program = stage_schedule(spec, s);
      BOOST_TEST((from_text(to_text(program, true)) == program), schedule_kind_name(kind) << " stage " << s);
    }
  }
  const std::vector<Instruction> with_recompute = {{OpType::RecvGradient, 12, 0}, {OpType::Recompute, 12, 0},
                                                   {OpType::Backward, 12, 0}, {OpType::ReduceGrads},
                                                   {OpType::OptimizerStep}};
  BOOST_TEST(to_text(with_recompute, true) == "rG12 R12 B12 RG S");
  BOOST_TEST((from_text("rG12 R12 B12 RG S") == with_recompute));
  BOOST_TEST(to_text(with_recompute) == "R12 B12 RG S");
}

BOOST_AUTO_TEST_CASE(instruction_text_carries_the_chunk_when_there_are_chunks) {
  BOOST_TEST(instruction_text({OpType::SendGradient, 3, 0}, 1) == "sG3");
  BOOST_TEST(instruction_text({OpType::SendGradient, 3, 0}, 2) == "sG3.0");
  BOOST_TEST(instruction_text({OpType::ReduceGrads}, 2) == "RG");
}

BOOST_AUTO_TEST_CASE(from_text_rejects_bad_tokens_naming_them) {
  for (const char* bad : {"F", "X3", "F3.", "F3.x", "RG3", "B-1", "Bi", "S0"}) {
    try {
      from_text(std::string("F0 ") + bad + " S");
      BOOST_ERROR("expected InputError for " << bad);
    } catch (const pw::InputError& e) {
      const std::string msg = e.what();
      BOOST_TEST(msg.find("token 1 '" + std::string(bad) + "'") != std::string::npos, msg);
      BOOST_TEST(msg.find("accepted") != std::string::npos, msg);
    }
  }
  BOOST_TEST(from_text("  ").empty());
}

BOOST_AUTO_TEST_CASE(kind_names_round_trip) {
  for (const char* name : {"gpipe", "1f1b", "interleaved", "zb-h1"})
    BOOST_TEST(schedule_kind_name(parse_schedule_kind(name)) == name);
  BOOST_TEST(op_name(OpType::BackwardWeight) == "BackwardWeight");
}

BOOST_AUTO_TEST_SUITE_END()
