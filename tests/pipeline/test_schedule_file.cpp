// Schedule files: hand-written programs parse to the expected instructions, round-trip through the
// writer, and every fault is a one-line InputError naming the file, line, stage and instruction.
#include <boost/test/unit_test.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "pipeline/recompute.h"
#include "pipeline/schedule_file.h"

using namespace pw::pipeline;

namespace {

const ScheduleSpec k1f1b22{ScheduleKind::OneFOneB, 2, 2, 1};

std::string parse_error(const std::string& text, const ScheduleSpec& spec = k1f1b22) {
  try {
    parse_schedule_text(text, spec, "bad.sched");
  } catch (const pw::InputError& e) {
    return e.what();
  }
  return "";
}

// A file whose stage 0 is on line 2 and stage 1 on line 3.
std::string two_stages(const std::string& stage0, const std::string& stage1) {
  return "# 1f1b, 2 stages, 2 micro-batches\n" + stage0 + "\n" + stage1 + "\n";
}

const std::string kStage0 = "F0 sA0 F1 sA1 rG0 B0 rG1 B1 RG S";
const std::string kStage1 = "rA0 F0 B0 sG0 rA1 F1 B1 sG1 RG S";

}  // namespace

BOOST_AUTO_TEST_SUITE(schedule_file)

// 1F1B for P = 2, M = 4 written out by hand (warm-up of P - s - 1 forwards, then F(w + i) B(i)),
// with comments, blank lines and extra spaces: it is what stage_schedule generates.
BOOST_AUTO_TEST_CASE(hand_written_1f1b_parses_to_the_generated_programs) {
  const std::string text =
      "# 1f1b, 2 stages, 4 micro-batches\n"
      "\n"
      "F0 sA0 F1 sA1 rG0 B0 F2 sA2 rG1 B1 F3 sA3 rG2 B2 rG3 B3 RG S\n"
      "   # the last stage: forward, then backward at once\n"
      "  rA0 F0 B0 sG0 rA1 F1 B1 sG1 rA2 F2 B2 sG2 rA3 F3 B3 sG3   RG S  \n";
  const ScheduleSpec spec{ScheduleKind::OneFOneB, 2, 4, 1};
  const auto programs = parse_schedule_text(text, spec);
  BOOST_REQUIRE_EQUAL(programs.size(), 2u);
  BOOST_TEST((programs[0] == stage_schedule(spec, 0)));
  BOOST_TEST((programs[1] == stage_schedule(spec, 1)));
}

// GPipe's order with stage 0 recomputing micro-batch 1 only, on a 1f1b-shaped pipeline.
BOOST_AUTO_TEST_CASE(hand_written_gpipe_with_one_recompute_parses_instruction_by_instruction) {
  const auto programs = parse_schedule_text(two_stages("F0 sA0 F1 sA1 rG0 B0 rG1 R1 B1 RG S", kStage1), k1f1b22);
  using enum OpType;
  const std::vector<Instruction> stage0 = {{Forward, 0},      {SendActivation, 0}, {Forward, 1},  {SendActivation, 1},
                                           {RecvGradient, 0}, {Backward, 0},       {RecvGradient, 1}, {Recompute, 1},
                                           {Backward, 1},     {ReduceGrads},       {OptimizerStep}};
  const std::vector<Instruction> stage1 = {{RecvActivation, 0}, {Forward, 0},  {Backward, 0}, {SendGradient, 0},
                                           {RecvActivation, 1}, {Forward, 1},  {Backward, 1}, {SendGradient, 1},
                                           {ReduceGrads},       {OptimizerStep}};
  BOOST_TEST((programs[0] == stage0));
  BOOST_TEST((programs[1] == stage1));
}

BOOST_AUTO_TEST_CASE(writer_golden_for_1f1b_with_recompute_except_last) {
  const ScheduleSpec spec{ScheduleKind::OneFOneB, 2, 4, 1};
  BOOST_TEST(schedule_file_text(spec, default_programs(spec, RecomputeMode::ExceptLast)) ==
             "# pipewright schedule: 2 stages, 4 micro-batches, 1 chunk(s) per stage; one line per stage, in stage "
             "order\n"
             "F0 sA0 F1 sA1 rG0 R0 B0 F2 sA2 rG1 R1 B1 F3 sA3 rG2 R2 B2 rG3 R3 B3 RG S\n"
             "rA0 F0 B0 sG0 rA1 F1 B1 sG1 rA2 F2 B2 sG2 rA3 F3 B3 sG3 RG S\n");
}

BOOST_AUTO_TEST_CASE(every_default_schedule_round_trips_through_the_writer) {
  for (ScheduleKind kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved,
                            ScheduleKind::ZeroBubbleH1}) {
    for (RecomputeMode mode : {RecomputeMode::None, RecomputeMode::All, RecomputeMode::ExceptLast}) {
      const ScheduleSpec spec{kind, 3, 6, kind == ScheduleKind::Interleaved ? 2 : 1};
      const auto programs = default_programs(spec, mode);
      BOOST_TEST((parse_schedule_text(schedule_file_text(spec, programs), spec) == programs),
                 schedule_kind_name(kind) << " recompute " << static_cast<int>(mode));
    }
  }
}

BOOST_AUTO_TEST_CASE(save_then_load_gives_the_same_programs) {
  const ScheduleSpec spec{ScheduleKind::Interleaved, 2, 4, 2};
  const auto programs = default_programs(spec, RecomputeMode::All);
  const auto path = (std::filesystem::temp_directory_path() / "pw_test_schedule_file.sched").string();
  save_schedule_file(path, spec, programs);
  BOOST_TEST((load_schedule_file(path, spec) == programs));
  BOOST_TEST(!std::filesystem::exists(path + ".tmp"));
  std::filesystem::remove(path);
}

BOOST_AUTO_TEST_CASE(a_missing_file_is_named) {
  try {
    load_schedule_file("/nonexistent/pw.sched", k1f1b22);
    BOOST_ERROR("expected InputError");
  } catch (const pw::InputError& e) {
    BOOST_TEST(std::string(e.what()) == "cannot open schedule file '/nonexistent/pw.sched': No such file or directory");
  }
}

BOOST_AUTO_TEST_CASE(wrong_number_of_stage_lines) {
  BOOST_TEST(parse_error("# only one\n" + kStage0 + "\n") ==
             "bad.sched: 1 stage line(s) for a pipeline of 2 stages; write one line per stage, in stage order "
             "(blank lines and lines starting with '#' are ignored)");
  BOOST_TEST(parse_error(two_stages(kStage0, kStage1) + kStage1 + "\n").starts_with(
      "bad.sched: 3 stage line(s) for a pipeline of 2 stages"));
}

BOOST_AUTO_TEST_CASE(unknown_token) {
  BOOST_TEST(parse_error(two_stages(kStage0, "rA0 F0 X0 B0 sG0 rA1 F1 B1 sG1 RG S")) ==
             "bad.sched:3: stage 1: token 2 'X0' is not an instruction; accepted: F<mb>, B<mb>, Bi<mb>, W<mb>, "
             "rA<mb>, sA<mb>, rG<mb>, sG<mb>, R<mb> (each optionally .<chunk>), F<mb>& (overlapped with the next "
             "backward), RG, S");
}

BOOST_AUTO_TEST_CASE(micro_batch_or_chunk_out_of_range) {
  BOOST_TEST(parse_error(two_stages("F0 sA0 F2 sA1 rG0 B0 rG1 B1 RG S", kStage1)) ==
             "bad.sched:2: stage 0 instruction 2 'F2': micro-batch 2 is out of range; the pipeline runs 2 (0..1)");
  BOOST_TEST(parse_error(two_stages(kStage0, "rA0 F0 B0 sG0 rA1 F1.1 B1 sG1 RG S")) ==
             "bad.sched:3: stage 1 instruction 5 'F1.1': chunk 1 is out of range; each stage holds 1 (0..0)");
}

BOOST_AUTO_TEST_CASE(missing_instruction) {
  BOOST_TEST(parse_error(two_stages("F0 sA0 F1 sA1 rG0 B0 rG1 RG S", kStage1)) ==
             "bad.sched:2: stage 0: 'B1' is missing; every micro-batch runs one backward on each chunk (B, or Bi and "
             "W)");
  BOOST_TEST(parse_error(two_stages(kStage0, "rA0 F0 B0 sG0 rA1 B1 sG1 RG S")) ==
             "bad.sched:3: stage 1: 'F1' is missing; every micro-batch runs one forward on each chunk");
  BOOST_TEST(parse_error(two_stages(kStage0, "rA0 F0 Bi0 sG0 rA1 F1 B1 sG1 RG S")) ==
             "bad.sched:3: stage 1: 'W0' is missing; the weight half of the split backward 'Bi0' must run too");
}

BOOST_AUTO_TEST_CASE(duplicate_instruction) {
  BOOST_TEST(parse_error(two_stages(kStage0, "rA0 F0 B0 sG0 rA1 F0 B1 sG1 RG S")) ==
             "bad.sched:3: stage 1 instruction 5 'F0': second 'F0' (the first is instruction 1)");
  BOOST_TEST(parse_error(two_stages(kStage0, "rA0 F0 B0 Bi0 sG0 rA1 F1 B1 sG1 RG S")) ==
             "bad.sched:3: stage 1 instruction 3 'Bi0': a second backward of the same micro-batch and chunk; write "
             "either B, or Bi and W");
  BOOST_TEST(parse_error(two_stages("F0 sA0 F1 sA1 rG0 R0 R0 B0 rG1 B1 RG S", kStage1)) ==
             "bad.sched:2: stage 0 instruction 6 'R0': second 'R0' (the first is instruction 5)");
}

BOOST_AUTO_TEST_CASE(sends_and_receives_must_match_the_neighbours) {
  BOOST_TEST(parse_error(two_stages("F0 sA0 F1 rG0 B0 rG1 B1 RG S", kStage1)) ==
             "bad.sched:2: stage 0: 'sA1' is missing; stage 1 receives that activation");
  BOOST_TEST(parse_error(two_stages(kStage0, "rA0 F0 B0 sG0 rA1 F1 B1 RG S")) ==
             "bad.sched:3: stage 1: 'sG1' is missing; stage 0 receives that gradient");
  BOOST_TEST(parse_error(two_stages("rA0 " + kStage0, kStage1)) ==
             "bad.sched:2: stage 0 instruction 0 'rA0': virtual stage 0 is the first: it reads the inputs and has no "
             "previous stage to receive activations from or send gradients to");
  BOOST_TEST(parse_error(two_stages(kStage0, "rA0 F0 sA0 B0 sG0 rA1 F1 B1 sG1 RG S")) ==
             "bad.sched:3: stage 1 instruction 2 'sA0': virtual stage 1 is the last: it computes the loss and has no "
             "next stage to send activations to or receive gradients from");
}

BOOST_AUTO_TEST_CASE(must_end_with_reduce_then_step) {
  BOOST_TEST(parse_error(two_stages("F0 sA0 F1 sA1 rG0 B0 rG1 B1 S", kStage1)) ==
             "bad.sched:2: stage 0: 'RG' is missing; a program ends with 'RG S'");
  BOOST_TEST(parse_error(two_stages("F0 sA0 F1 sA1 rG0 B0 rG1 B1 S RG", kStage1)) ==
             "bad.sched:2: stage 0 instruction 8 'S': a program ends with 'RG S'; this S has instructions after it");
  BOOST_TEST(parse_error(two_stages("F0 sA0 F1 sA1 rG0 B0 RG rG1 B1 S", kStage1)) ==
             "bad.sched:2: stage 0 instruction 6 'RG': a program ends with 'RG S'; this RG is not right before S");
}

BOOST_AUTO_TEST_CASE(order_errors_come_from_the_simulator_with_the_line) {
  BOOST_TEST(parse_error(two_stages(kStage0, "F0 rA0 B0 sG0 rA1 F1 B1 sG1 RG S")) ==
             "bad.sched:3: stage 1 instruction 0 'F0': forward before its RecvActivation");
  BOOST_TEST(parse_error(two_stages("F0 sA0 F1 sA1 rG0 B0 rG1 B1 R1 RG S", kStage1)) ==
             "bad.sched:2: stage 0 instruction 8 'R1': recompute outside forward..backward");
}

BOOST_AUTO_TEST_CASE(deadlock) {
  // Stage 1 wants micro-batch 1 first; stage 0 sends it only after micro-batch 0's gradient is back.
  BOOST_TEST(parse_error(two_stages("F0 sA0 rG0 B0 F1 sA1 rG1 B1 RG S", "rA1 F1 B1 sG1 rA0 F0 B0 sG0 RG S")) ==
             "bad.sched:2: deadlocks (2 stages, 2 micro-batches, 1 chunks): stage 0 waits at instruction 2 'rG0' for "
             "the gradient of micro-batch 0 chunk 0 (stage 1 sends it at instruction 7 'sG0' but is at instruction 0 "
             "'rA1'); stage 1 waits at instruction 0 'rA1' for the activation of micro-batch 1 chunk 0 (stage 0 sends "
             "it at instruction 5 'sA1' but is at instruction 2 'rG0')");
}

BOOST_AUTO_TEST_CASE(a_bad_shape_names_the_source) {
  BOOST_TEST(parse_error(two_stages(kStage0, kStage1), {ScheduleKind::OneFOneB, 2, 2, 2}) ==
             "bad.sched: 1f1b schedule: 2 chunks per stage; it takes exactly 1 (only interleaved and V schedules take more)");
}

BOOST_AUTO_TEST_SUITE_END()
