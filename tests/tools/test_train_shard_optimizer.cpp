// `pipewright train --shard-optimizer`: each replica of a stage keeps the optimizer state of its
// share of the parameters. Embedded (ranks as threads) and as processes under `pipewright
// launch`, the same job gives the same bits; with 2 replicas those are the replicated optimizer's
// bits too (a sum of two gradients has one order), with 4 they agree within 1e-6 (Gloo's reduce
// and all-reduce add in other orders). A checkpoint written by sharded processes resumes in an
// unsharded job of one replica.
#include <cmath>
#include <filesystem>
#include <utility>

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "tests/tools/cli_runner.h"
#include "tests/tools/job_outputs.h"

using pw::test::check_losses_close;
using pw::test::check_same;
using pw::test::read_json;
using pw::test::run_job;
using pw::test::run_pipewright;
using pw::test::ScratchDir;

namespace {

const std::string kCommon =
    "--model seed-cnn --dataset synthetic --synthetic-size 512 --batch-size 32 --seed 5 --threads 1 --eval-batches 2 "
    "--steps 6 --bucket-size 16KiB ";
const std::string kAdam = "--optimizer adam --lr 0.002 ";
const std::string kSgd = "--optimizer sgd --lr 0.05 --momentum 0.9 ";
const std::string kJob = kCommon + kAdam;

}  // namespace

BOOST_AUTO_TEST_SUITE(train_shard_optimizer)

BOOST_AUTO_TEST_CASE(two_replicas_sharded_match_replicated_and_processes_match_threads_bitwise) {
  ScratchDir dir("shard-optimizer-2");
  for (const auto& [name, optimizer] : {std::pair{std::string("adam"), kAdam}, std::pair{std::string("sgd"), kSgd}}) {
    BOOST_TEST_CONTEXT(name) {
      const std::string job = kCommon + optimizer + "--replicas 2 --stages 2 --micro-batches 2 ";
      run_job(dir, "train " + job, name + "-replicated");
      run_job(dir, "train " + job + "--shard-optimizer", name + "-sharded");
      check_same(dir, name + "-replicated", name + "-sharded");
      const auto launched = run_job(dir, "launch --nproc-per-node 4 -- " + job + "--shard-optimizer", name + "-launched");
      BOOST_TEST(launched["world_size"] == 4);
      BOOST_TEST(launched["optimizer_state"] == "sharded");
      check_same(dir, name + "-sharded", name + "-launched");
    }
  }
  const std::string job = kJob + "--replicas 2 --stages 2 --micro-batches 2 ";
  // Over the job's own links: threads and processes alike again.
  run_job(dir, "train " + job + "--shard-optimizer --cpu-collectives links", "links");
  run_job(dir, "launch --nproc-per-node 4 -- " + job + "--shard-optimizer --cpu-collectives links", "launched-links");
  check_same(dir, "links", "launched-links");
}

BOOST_AUTO_TEST_CASE(four_replicas_sharded_follow_replicated_and_resume_unsharded) {
  ScratchDir dir("shard-optimizer-4");
  const std::string job = kJob + "--replicas 4 ";
  const auto replicated = run_job(dir, "train " + job, "replicated");
  const auto sharded = run_job(dir, "train " + job + "--shard-optimizer", "sharded");
  check_losses_close(replicated, sharded, 1e-6);
  const std::string checkpoints = dir.file("ckpt");
  run_job(dir, "launch --nproc-per-node 4 -- " + job + "--shard-optimizer --checkpoint-dir " + checkpoints +
               " --checkpoint-every 3",
      "launched");
  check_same(dir, "sharded", "launched");
  // The sharded processes' checkpoint of step 3 resumed by one unsharded replica, and by the
  // replicated 4-replica job: both go on from the same state.
  const std::string resume = " --resume " + checkpoints + "/step-0000003";
  const auto one = run_job(dir, "train " + kJob + resume, "resumed-one");
  const auto four = run_job(dir, "train " + job + resume, "resumed-four");
  // A resumed job's history holds the checkpoint's steps first.
  const auto& full = replicated["loss_history"];
  BOOST_REQUIRE_EQUAL(four["loss_history"].size(), 6u);
  BOOST_REQUIRE_EQUAL(one["loss_history"].size(), 6u);
  for (std::size_t i = 3; i < 6; ++i) {
    const double want = full[i].get<double>();
    BOOST_TEST(std::abs(four["loss_history"][i].get<double>() - want) <= 1e-6 * want, "step " << i + 1);
    BOOST_TEST(std::abs(one["loss_history"][i].get<double>() - want) <= 1e-4 * want, "step " << i + 1);
  }
}

BOOST_AUTO_TEST_SUITE_END()
