// A model too large for its devices, made to fit (issue: oversized models). vgg16 at width 16 on
// 3x72x72 inputs has 43.4 M parameters, 25.7 M of them in one layer (classifier.0, which no split
// can divide). With Adam in fp32 a stage holding it needs 16 bytes per parameter: 392 MiB.
//   - 4 stages on 4 devices capped at 350 MiB: `plan` says, in one line, which stage is over its
//     cap and by how much, before anything runs, and `train` indeed runs out of memory there.
//   - 2 stages x 2 replicas with --shard-optimizer: 8 + 8/2 bytes per parameter, 314 MiB on the
//     stage holding classifier.0; the plan fits and the job trains under the 350 MiB caps, to the
//     losses of the same job unsharded with the caps lifted.
//   - at 260 MiB that sharded job is over again; with --offload-optimizer (the optimizer state in
//     host memory, outside the device cap) it fits and trains to the same losses.
// A sharded checkpoint resuming into other replica counts and into an unsharded job is tested in
// test_train_shard_optimizer.
#include <string>

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "tests/tools/cli_runner.h"
#include "tests/tools/job_outputs.h"

using namespace pw::test;

namespace {

const std::string kModel =
    " --model vgg16 --width 16 --dataset synthetic --synthetic-shape 3x72x72 --batch-size 8 --optimizer adam";
const std::string kTrain = kModel + " --synthetic-size 64 --steps 3 --eval-batches 1 --seed 5";
const std::string kFourStages = " --stages 4 --split 31,33,36";
const std::string kTwoByTwo = " --stages 2 --replicas 2 --split 36";

// The one line `plan` gives a layout over its cap ("" when every stage fits).
std::string over_cap_line(const std::string& output) {
  const auto at = output.find("warning: stage ");
  if (at == std::string::npos) return "";
  return output.substr(at, output.find('\n', at) - at);
}

std::string plan(const std::string& layout) {
  const auto r = run_pipewright("plan" + kModel + layout);
  BOOST_REQUIRE_MESSAGE(r.status == 0, layout << "\n" << r.output);
  return r.output;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(oversized_model)

BOOST_AUTO_TEST_CASE(four_capped_stages_do_not_fit_and_the_plan_says_why_before_anything_runs) {
  const std::string layout = kFourStages + " --device-memory 350MiB";
  const auto line = over_cap_line(plan(layout));
  BOOST_TEST(line.find("stage 2 needs") != std::string::npos, line);
  BOOST_TEST(line.find("over its 350.00 MiB cap") != std::string::npos, line);

  const auto r = run_pipewright("train" + kTrain + layout);
  BOOST_TEST(r.status == 1, r.output);   // out of memory (docs/running_safely.md)
  BOOST_TEST(r.output.find("out of memory on cpu:2") != std::string::npos, r.output);
}

BOOST_AUTO_TEST_CASE(two_stages_by_two_sharded_replicas_fit_the_same_caps_and_train_as_unsharded) {
  ScratchDir dir("oversized_sharded");
  BOOST_TEST(over_cap_line(plan(kTwoByTwo + " --shard-optimizer --device-memory 350MiB")).empty());
  BOOST_TEST(!over_cap_line(plan(kTwoByTwo + " --device-memory 350MiB")).empty());   // not without sharding

  const auto uncapped = run_job(dir, "train" + kTrain + kTwoByTwo, "uncapped");
  const auto sharded = run_job(dir, "train" + kTrain + kTwoByTwo + " --shard-optimizer --device-memory 350MiB",
                               "sharded");
  check_losses_close(sharded, uncapped, 1e-6);
  for (const auto& rank : sharded["memory"]) BOOST_TEST(rank["peak_bytes"].get<double>() <= 350.0 * (1 << 20));
}

BOOST_AUTO_TEST_CASE(with_the_optimizer_state_offloaded_it_fits_a_smaller_cap_and_trains_alike) {
  ScratchDir dir("oversized_offloaded");
  const std::string cap = " --device-memory 260MiB";
  BOOST_TEST(!over_cap_line(plan(kTwoByTwo + " --shard-optimizer" + cap)).empty());
  BOOST_TEST(over_cap_line(plan(kTwoByTwo + " --shard-optimizer --offload-optimizer" + cap)).empty());

  const auto uncapped = run_job(dir, "train" + kTrain + kTwoByTwo, "uncapped");
  const auto offloaded =
      run_job(dir, "train" + kTrain + kTwoByTwo + " --shard-optimizer --offload-optimizer" + cap, "offloaded");
  check_losses_close(offloaded, uncapped, 1e-6);
  for (const auto& rank : offloaded["memory"]) {
    BOOST_TEST(rank["peak_bytes"].get<double>() <= 260.0 * (1 << 20));
    BOOST_TEST(rank["by_kind"]["optimizer_state"].get<double>() == 0.0);
  }
}

BOOST_AUTO_TEST_SUITE_END()
