// `pipewright train --offload-optimizer`: each rank's optimizer state (its owned slices with
// --shard-optimizer) lives in host memory and is updated there. The vectorised host update gives
// the device update's bits, so the offloaded job is bitwise the job without offload, embedded, and
// the same job as processes under `pipewright launch` is bitwise the embedded one. The summary
// says where the state was: none of it in any rank's device memory.
#include <string>

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "tests/tools/cli_runner.h"
#include "tests/tools/job_outputs.h"

using pw::test::check_same;
using pw::test::run_job;
using pw::test::ScratchDir;

namespace {

const std::string kJob =
    "--model seed-cnn --dataset synthetic --synthetic-size 512 --batch-size 32 --seed 5 --threads 1 --eval-batches 2 "
    "--steps 6 --bucket-size 16KiB --optimizer adam --lr 0.002 --replicas 2 --stages 2 --micro-batches 2 ";

}  // namespace

BOOST_AUTO_TEST_SUITE(train_offload_optimizer)

BOOST_AUTO_TEST_CASE(offloaded_sharded_state_as_processes_matches_threads_and_the_device_state_bitwise) {
  ScratchDir dir("offload-optimizer");
  const std::string sharded = kJob + "--shard-optimizer ";
  run_job(dir, "train " + sharded, "device");
  const auto host = run_job(dir, "train " + sharded + "--offload-optimizer", "host");
  check_same(dir, "device", "host");
  for (const auto& rank : host["memory"]) BOOST_TEST(rank["by_kind"]["optimizer_state"] == 0);
  const auto launched = run_job(dir, "launch --nproc-per-node 4 -- " + sharded + "--offload-optimizer", "launched");
  BOOST_TEST(launched["world_size"] == 4);
  check_same(dir, "host", "launched");
  for (const auto& rank : launched["memory"]) BOOST_TEST(rank["by_kind"]["optimizer_state"] == 0);
}

BOOST_AUTO_TEST_SUITE_END()
