// `pipewright train --offload-optimizer`: each rank's optimizer state (its owned slices with
// --shard-optimizer) lives in host memory and is updated there. The vectorised host update gives
// the device update's bits, so the offloaded job is bitwise the job without offload, embedded, and
// the same job as processes under `pipewright launch` is bitwise the embedded one. The summary
// says where the state was: none of it in any rank's device memory.
#include <cstdint>
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
  const auto device = run_job(dir, "train " + sharded, "device");
  const auto host = run_job(dir, "train " + sharded + "--offload-optimizer", "host");
  check_same(dir, "device", "host");
  BOOST_REQUIRE_EQUAL(host["memory"].size(), 4u);
  for (std::size_t r = 0; r < 4; ++r) {
    BOOST_TEST(device["memory"][r]["by_kind"]["optimizer_state"].get<std::int64_t>() > 0);
    BOOST_TEST(device["memory"][r]["host_bytes"] == 0);
    BOOST_TEST(host["memory"][r]["by_kind"]["optimizer_state"] == 0);
    // The state moved to the host: what the device held of it, the host holds now.
    BOOST_TEST(host["memory"][r]["host_bytes"].get<std::int64_t>() > 0);
  }
  const auto launched = run_job(dir, "launch --nproc-per-node 4 -- " + sharded + "--offload-optimizer", "launched");
  BOOST_TEST(launched["world_size"] == 4);
  check_same(dir, "host", "launched");
  for (std::size_t r = 0; r < 4; ++r) {
    BOOST_TEST(launched["memory"][r]["by_kind"]["optimizer_state"] == 0);
    BOOST_TEST(launched["memory"][r]["host_bytes"] == host["memory"][r]["host_bytes"]);
  }
}

BOOST_AUTO_TEST_SUITE_END()
