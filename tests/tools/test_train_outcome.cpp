// A job that did not train says so: it exits with status 6 and one line naming the cause, and its
// summary records it (fp16 overflow on every step, divergence, no rollback left); a resumed job
// with no step left to make, or with a flag that cannot change, is a one-line input error
// (status 2); a flag that may change is applied and logged as an override. The CLI end to end.
#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "tests/tools/job_outputs.h"

using pw::test::CommandResult;
using pw::test::read_json;
using pw::test::run_command;
using pw::test::run_pipewright;
using pw::test::ScratchDir;

namespace {

// The issue's $B.
const std::string kBase = "train --model seed-cnn --dataset synthetic --synthetic-size 512 --threads 1 --eval-batches 1 ";
const std::string kJob = kBase + "--batch-size 16 ";

CommandResult run_with_faults(const std::string& faults, const std::string& args) {
  return run_command("PW_INJECT_FAULT=" + faults + " " + pw::test::pipewright_binary() + " " + args);
}

// The lines of `output` that start with `prefix`.
std::vector<std::string> lines_starting(const std::string& output, const std::string& prefix) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at < output.size()) {
    const auto end = output.find('\n', at);
    const auto line = output.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (line.rfind(prefix, 0) == 0) out.push_back(line);
    if (end == std::string::npos) break;
    at = end + 1;
  }
  return out;
}

// Exit status 6, and exactly one "pipewright: did not train: ..." line holding `cause`.
void check_did_not_train(const CommandResult& r, const std::string& cause) {
  BOOST_TEST(r.status == 6, r.output);
  const auto lines = lines_starting(r.output, "pipewright: did not train: ");
  BOOST_REQUIRE_MESSAGE(lines.size() == 1u, r.output);
  BOOST_TEST(lines.front().find(cause) != std::string::npos, lines.front());
  BOOST_TEST(r.output.find("internal error") == std::string::npos, r.output);
}

// Exit status 2 and one "pipewright: error: ..." line holding every piece of `parts`.
void check_input_error(const CommandResult& r, const std::vector<std::string>& parts) {
  BOOST_TEST(r.status == 2, r.output);
  const auto lines = lines_starting(r.output, "pipewright: error: ");
  BOOST_REQUIRE_MESSAGE(lines.size() == 1u, r.output);
  for (const auto& part : parts) BOOST_TEST(lines.front().find(part) != std::string::npos, lines.front());
}

}  // namespace

BOOST_AUTO_TEST_CASE(fp16_overflowing_on_every_step_stops_naming_the_loss_scale) {
  ScratchDir dir("outcome_overflow");
  const auto r = run_pipewright(kJob + "--steps 8 --precision fp16 --initial-loss-scale 1e30 --summary " +
                                dir.file("s.json") + " --save " + dir.file("w.safetensors"));
  check_did_not_train(r, "fp16 gradients overflowed on 3 steps in a row (up to step 3), the last at loss scale 2.5e+29");
  BOOST_TEST(r.output.find("--initial-loss-scale 65536 or less") != std::string::npos, r.output);
  const auto s = read_json(dir.file("s.json"));
  BOOST_TEST(s["status"] == "did-not-train");
  BOOST_TEST(s["failure"].get<std::string>().find("loss scale 2.5e+29") != std::string::npos);
  BOOST_TEST(s["loss_history"].size() == 3u);   // stopped there, not after the 8 steps asked for
  BOOST_TEST(s["skipped_steps"] == 3);
  // The weights of a job that did not train are not written.
  BOOST_TEST(!std::filesystem::exists(dir.file("w.safetensors")));
}

BOOST_AUTO_TEST_CASE(a_job_that_trains_says_so_in_its_summary) {
  ScratchDir dir("outcome_ok");
  const auto r = run_pipewright(kJob + "--steps 3 --summary " + dir.file("s.json"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  const auto s = read_json(dir.file("s.json"));
  BOOST_TEST(s["status"] == "trained");
  BOOST_TEST(!s.contains("failure"));
}

BOOST_AUTO_TEST_CASE(a_diverging_job_exits_non_zero_with_the_cause) {
  // The run: fp16, SGD at lr 1e6, a checkpoint every step. It ended with test loss -nan
  // and status 0; whatever stops it now (no rollback left, non-finite weights or test loss), it
  // says so and fails.
  ScratchDir dir("outcome_diverged");
  const auto r = run_pipewright(kJob + "--steps 32 --precision fp16 --optimizer sgd --lr 1e6 --checkpoint-every 1 "
                                       "--checkpoint-dir " + dir.file("ckpt") + " --summary " + dir.file("s.json"));
  check_did_not_train(r, "");
  const auto s = read_json(dir.file("s.json"));
  BOOST_TEST(s["status"] == "did-not-train");
  BOOST_TEST(!s["failure"].get<std::string>().empty());
  BOOST_TEST(lines_starting(r.output, "pipewright: did not train: ").front() ==
             "pipewright: did not train: " + s["failure"].get<std::string>());
}

BOOST_AUTO_TEST_CASE(a_job_gives_up_after_max_rollbacks_in_a_row) {
  // Step 4 goes bad every time it is made: each rollback goes back to step 2, makes step 3 (a good
  // one, so the weights move on from the checkpoint's) and step 4 again.
  ScratchDir dir("outcome_rollbacks");
  const std::string bad4 = "nonfinite-grad@4:0";
  const auto r = run_with_faults(bad4 + "," + bad4 + "," + bad4,
                                 kJob + "--steps 6 --max-bad-steps 1 --max-rollbacks 2 --checkpoint-every 2 "
                                        "--checkpoint-dir " + dir.file("ckpt") + " --summary " + dir.file("s.json"));
  check_did_not_train(r, "1 steps in a row (up to step 4) had a non-finite loss or gradients after 2 rollbacks in a "
                         "row (--max-rollbacks 2;");
  BOOST_TEST(r.output.find("giving up: lower --lr or clip with --clip-grad-norm") != std::string::npos, r.output);
  const auto s = read_json(dir.file("s.json"));
  BOOST_TEST(s["status"] == "did-not-train");
  BOOST_TEST(s["rollbacks"] == 2);

  // The same step bad right after a rollback, before any step is applied: the checkpoint's own
  // weights and the same batch give the same result, so the job stops rather than loop.
  const std::string bad3 = "nonfinite-grad@3:0";
  const auto again = run_with_faults(bad3 + "," + bad3,
                                     kJob + "--steps 6 --max-bad-steps 1 --checkpoint-every 2 --checkpoint-dir " +
                                         dir.file("ckpt3"));
  check_did_not_train(again, "1 steps in a row (up to step 3) had a non-finite loss or gradients right after rolling "
                             "back to the checkpoint of step 2");

  // Rollbacks that train past the step where the last one began are not in a row: the same
  // limit lets a job with two separate bad steps finish.
  const auto ok = run_with_faults("nonfinite-grad@3:0,nonfinite-grad@5:0",
                                  kJob + "--steps 6 --max-bad-steps 1 --max-rollbacks 1 --checkpoint-every 2 "
                                         "--checkpoint-dir " + dir.file("ckpt2") + " --summary " + dir.file("ok.json"));
  BOOST_REQUIRE_MESSAGE(ok.status == 0, ok.output);
  const auto t = read_json(dir.file("ok.json"));
  BOOST_TEST(t["status"] == "trained");
  BOOST_TEST(t["rollbacks"] == 2);
}

BOOST_AUTO_TEST_CASE(non_finite_steps_without_a_checkpoint_did_not_train) {
  const auto r = run_with_faults("nonfinite-grad@2:0,nonfinite-grad@3:0", kJob + "--steps 4 --max-bad-steps 2");
  check_did_not_train(r, "2 steps in a row (up to step 3) had a non-finite loss or gradients and there is no "
                         "checkpoint to roll back to; lower --lr");
}

BOOST_AUTO_TEST_CASE(resuming_with_no_step_left_is_an_input_error_naming_both_steps) {
  ScratchDir dir("outcome_resume_steps");
  const auto ckpt = dir.file("ckpt");
  const auto first = run_pipewright(kJob + "--steps 6 --checkpoint-every 6 --checkpoint-dir " + ckpt);
  BOOST_REQUIRE_MESSAGE(first.status == 0, first.output);
  for (const std::string steps : {"4", "6"}) {
    BOOST_TEST_CONTEXT("--steps " << steps) {
      const auto r = run_pipewright(kJob + "--steps " + steps + " --resume " + ckpt);
      check_input_error(r, {"--steps: " + steps + " is at or below step 6 of the checkpoint resumed",
                            "give more than 6"});
      BOOST_TEST(r.output.find("step 6 of " + steps) == std::string::npos, r.output);
    }
  }
  // Epochs are counted the same way: 1 epoch of 512 / 16 = 32 steps after a checkpoint of step 32.
  const auto whole = run_pipewright(kJob + "--epochs 1 --checkpoint-every 32 --checkpoint-dir " + dir.file("epoch"));
  BOOST_REQUIRE_MESSAGE(whole.status == 0, whole.output);
  check_input_error(run_pipewright(kJob + "--epochs 1 --resume " + dir.file("epoch")),
                    {"--epochs: 1 (32 steps) is at or below step 32 of the checkpoint resumed", "--steps above 32"});
}

BOOST_AUTO_TEST_CASE(a_flag_that_differs_from_the_checkpoint_is_applied_and_logged_or_refused) {
  ScratchDir dir("outcome_resume_flags");
  const auto ckpt = dir.file("ckpt");
  const std::string sgd = "--optimizer sgd --lr 0.1 ";
  const auto first = run_pipewright(kJob + sgd + "--steps 6 --checkpoint-every 6 --checkpoint-dir " + ckpt);
  BOOST_REQUIRE_MESSAGE(first.status == 0, first.output);

  // The learning rate: applied, and said.
  auto r = run_pipewright(kJob + "--optimizer sgd --lr 0.5 --steps 8 --resume " + ckpt + " --summary " +
                          dir.file("lr.json"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  BOOST_TEST(r.output.find("overriding --lr 0.1 from the checkpoint with 0.5") != std::string::npos, r.output);
  BOOST_TEST(read_json(dir.file("lr.json"))["lr"].get<double>() == 0.5);

  // The same flags as the checkpoint's job: nothing to override, the checkpoint's lr stands.
  r = run_pipewright(kJob + sgd + "--steps 8 --resume " + ckpt + " --summary " + dir.file("same.json"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  BOOST_TEST(r.output.find("overriding") == std::string::npos, r.output);
  BOOST_TEST(read_json(dir.file("same.json"))["lr"].get<double>() == 0.1);

  // Another shape of the pipeline and clipping: applied, and said.
  r = run_pipewright(kJob + sgd + "--steps 8 --stages 2 --clip-grad-norm 1 --resume " + ckpt);
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  BOOST_TEST(r.output.find("overriding --stages 0 from the checkpoint with 2") != std::string::npos, r.output);
  BOOST_TEST(r.output.find("overriding --clip-grad-norm 0.0 from the checkpoint with 1.0") != std::string::npos,
             r.output);

  // What the checkpoint's tensors or data position mean cannot change: refused in one line.
  check_input_error(run_pipewright(kBase + sgd + "--steps 8 --batch-size 32 --resume " + ckpt),
                    {"--batch-size: 16 in the checkpoint, 32 now"});
  check_input_error(run_pipewright(kJob + sgd + "--steps 8 --momentum 0.5 --resume " + ckpt),
                    {"--momentum: 0.9 in the checkpoint, 0.5 now"});
  check_input_error(run_pipewright(kJob + "--optimizer adam --steps 8 --resume " + ckpt),
                    {"--optimizer: \"sgd\" in the checkpoint, \"adam\" now"});
}
