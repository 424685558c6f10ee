// `pipewright train --replicas R --stages P`: embedded (ranks as threads) and as processes, the loss
// history follows one stage with the global batch; a lost rank ends a hybrid job with its name.
#include <cmath>
#include <fstream>

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "tests/tools/background_command.h"
#include "tests/tools/cli_runner.h"

using pw::test::BackgroundCommand;
using pw::test::run_pipewright;
using pw::test::ScratchDir;

namespace {

const std::string kJob =
    "--model seed-cnn --dataset synthetic --synthetic-size 512 --batch-size 32 --optimizer sgd --lr 0.05 --seed 5 "
    "--threads 1 --eval-batches 2 --steps 6 ";

nlohmann::json run(const ScratchDir& dir, const std::string& command, const std::string& name) {
  const auto r = run_pipewright(command + " --summary " + dir.file(name));
  BOOST_REQUIRE_MESSAGE(r.status == 0, command << "\n" << r.output);
  return nlohmann::json::parse(std::ifstream(dir.file(name)));
}

void check_follows(const nlohmann::json& reference, const nlohmann::json& run) {
  const auto& a = reference["loss_history"];
  const auto& b = run["loss_history"];
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double x = a[i].get<double>(), y = b[i].get<double>();
    BOOST_TEST(std::abs(x - y) / x <= 1e-5, "step " << i << ": " << x << " vs " << y);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(train_hybrid)

BOOST_AUTO_TEST_CASE(two_by_two_follows_one_by_one_embedded_and_as_four_processes) {
  ScratchDir dir("hybrid");
  // One stage with 4 micro-batches sees the same micro-batches as 2 replicas x 2 micro-batches.
  const auto single = run(dir, "train " + kJob + "--micro-batches 4", "single.json");
  const auto embedded = run(dir, "train " + kJob + "--replicas 2 --stages 2 --micro-batches 2 --bucket-size 1KiB",
                            "embedded.json");
  BOOST_TEST(embedded["replicas"] == 2);
  BOOST_TEST(embedded["gradient_buckets"].size() == 2u);
  BOOST_TEST(embedded["gradient_buckets"][1].get<int>() > 1);   // fc1's weight alone is far over 1 KiB
  check_follows(single, embedded);
  const auto launched = run(dir, "launch --nproc-per-node 4 -- " + kJob + "--replicas 2 --stages 2 --micro-batches 2",
                            "launched.json");
  BOOST_TEST(launched["replicas"] == 2);
  BOOST_TEST(launched["world_size"] == 4);
  check_follows(single, launched);
  BOOST_TEST(std::abs(single["test_loss"].get<double>() - launched["test_loss"].get<double>()) /
                 single["test_loss"].get<double>() <= 1e-4);
}

BOOST_AUTO_TEST_CASE(fp16_compressed_gradients_stay_close) {
  ScratchDir dir("fp16");
  const auto plain = run(dir, "train " + kJob + "--replicas 2 --micro-batches 2", "plain.json");
  const auto half = run(dir, "train " + kJob + "--replicas 2 --micro-batches 2 --grad-compression fp16", "half.json");
  BOOST_TEST(half["grad_compression"] == "fp16");
  const auto& a = plain["loss_history"];
  const auto& b = half["loss_history"];
  bool differs = false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double x = a[i].get<double>(), y = b[i].get<double>();
    BOOST_TEST(std::abs(x - y) / x <= 1e-2, "step " << i << ": " << x << " vs " << y);
    differs = differs || x != y;
  }
  BOOST_TEST(differs, "fp16 compression changed nothing; was it applied?");
}

BOOST_AUTO_TEST_CASE(a_lost_rank_ends_a_hybrid_job_naming_it) {
  ScratchDir dir("hybridkill");
  BackgroundCommand job(pw::test::pipewright_binary() +
                            " launch --grace 60 --nproc-per-node 4 -- --model seed-cnn --dataset synthetic "
                            "--synthetic-size 4096 --batch-size 32 --threads 1 --epochs 100 --log-every 1 --replicas 2 "
                            "--stages 2",
                        dir.file("job.log"));
  BOOST_REQUIRE_MESSAGE(job.wait_for_output("[rank 0] step ", std::chrono::seconds(120), 3), job.output());
  pid_t victim = -1;
  for (pid_t pid : job.children())
    if (pw::test::rank_of(pid) == 3) victim = pid;
  BOOST_REQUIRE(victim > 0);
  kill(victim, SIGKILL);
  const auto status = job.wait(std::chrono::seconds(30));
  BOOST_REQUIRE_MESSAGE(status.has_value(), "the job still runs 30 s after a rank was killed:\n" << job.output());
  const auto out = job.output();
  BOOST_TEST(*status != 0);
  BOOST_TEST(out.find("job failed: rank 3 was killed by signal 9") != std::string::npos, out);
  for (int survivor : {0, 1, 2}) {
    const std::string prefix = "[rank " + std::to_string(survivor) + "] pipewright: stopped: ";
    const auto at = out.find(prefix);
    BOOST_TEST_REQUIRE(at != std::string::npos, out);
    const auto line = out.substr(at, out.find('\n', at) - at);
    BOOST_TEST(line.find("rank 3 (stage 1, replica 1) was lost") != std::string::npos, line);
  }
}

BOOST_AUTO_TEST_CASE(bad_replica_flags_get_one_line_errors) {
  auto r = run_pipewright("train " + kJob + "--replicas 3");
  BOOST_TEST(r.status == 2);
  BOOST_TEST(r.output.find("--batch-size: 32 (the global batch) does not split evenly over 3 replicas") !=
                 std::string::npos,
             r.output);
  r = run_pipewright("train " + kJob + "--replicas 2 --grad-compression zip");
  BOOST_TEST(r.status == 2);
  BOOST_TEST(r.output.find("unknown gradient compression 'zip'; accepted: none, fp16") != std::string::npos, r.output);
  r = run_pipewright("train " + kJob + "--replicas 2 --bucket-size lots");
  BOOST_TEST(r.status == 2);
  BOOST_TEST(r.output.find("--bucket-size: bad byte size 'lots'") != std::string::npos, r.output);
  r = run_pipewright("train " + kJob + "--replicas 2 --micro-batches 32");
  BOOST_TEST(r.status == 2);
  BOOST_TEST(r.output.find("(16 per replica) does not split into 32 equal micro-batches") != std::string::npos,
             r.output);
  r = run_pipewright("launch --nproc-per-node 2 -- " + kJob + "--replicas 2 --stages 2");
  BOOST_TEST(r.status == 2);
  BOOST_TEST(r.output.find("--stages 2 x --replicas 2 needs 4") != std::string::npos, r.output);
}

BOOST_AUTO_TEST_SUITE_END()
