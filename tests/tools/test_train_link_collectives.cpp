// `--cpu-collectives links`: replicas reduce over the job's own (token-carrying) links instead of
// Gloo. Losses follow Gloo's within rounding, and the same job gives the same bits embedded (ranks
// as threads) and as processes under `pipewright launch`.
#include <unistd.h>

#include <cmath>
#include <cstdlib>

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "tests/tools/background_command.h"
#include "tests/tools/cli_runner.h"
#include "tests/tools/network_namespaces.h"
#include "tests/tools/job_outputs.h"

using pw::test::BackgroundCommand;
using pw::test::check_losses_close;
using pw::test::check_same;
using pw::test::read_json;
using pw::test::run_job;
using pw::test::run_pipewright;
using pw::test::ScratchDir;

namespace {

const std::string kJob =
    "--model seed-cnn --dataset synthetic --synthetic-size 512 --batch-size 32 --optimizer sgd --lr 0.05 --seed 5 "
    "--threads 1 --eval-batches 2 --steps 6 --bucket-size 4KiB ";
// ResNet's batch norms add the sync-batch-norm group beside the gradient group on the same ranks.
const std::string kNormJob =
    "--model resnet18 --width 4 --dataset synthetic --synthetic-shape 3x16x16 --synthetic-size 128 --batch-size 16 "
    "--seed 9 --threads 1 --eval-batches 1 --steps 3 --sync-batch-norm ";

}  // namespace

BOOST_AUTO_TEST_SUITE(train_link_collectives)

BOOST_AUTO_TEST_CASE(links_follow_gloo_and_match_bitwise_across_threads_and_processes) {
  ScratchDir dir("link-collectives");
  const std::string replicated = kJob + "--replicas 2 --stages 2 --micro-batches 2 ";
  const auto gloo = run_job(dir, "train " + replicated + "--cpu-collectives gloo", "gloo");
  const auto links = run_job(dir, "train " + replicated + "--cpu-collectives links", "links");
  BOOST_TEST(gloo["collectives"] == "gloo");
  BOOST_TEST(links["collectives"] == "links");
  check_losses_close(gloo, links, 1e-6);
  // Embedded with in-process links, then 4 processes over Thrift: the same bits.
  const auto launched =
      run_job(dir, "launch --nproc-per-node 4 -- " + replicated + "--cpu-collectives links", "launched");
  BOOST_TEST(launched["collectives"] == "links");
  BOOST_TEST(launched["world_size"] == 4);
  check_same(dir, "links", "launched");
  // Ranks on loopback: auto keeps Gloo, the faster one on one host.
  const auto automatic = run_job(dir, "launch --nproc-per-node 2 -- " + kJob + "--replicas 2", "auto");
  BOOST_TEST(automatic["collectives"] == "gloo");
}

BOOST_AUTO_TEST_CASE(compressed_gradients_and_synchronised_batch_norm_over_links) {
  ScratchDir dir("link-collectives-bn");
  const std::string job = kNormJob + "--replicas 2 --grad-compression bf16 ";
  const auto gloo = run_job(dir, "train " + job + "--cpu-collectives gloo", "gloo");
  const auto links = run_job(dir, "train " + job + "--cpu-collectives links", "links");
  // bf16 sums round to 8 bits at every step; two replicas add in one order either way.
  check_losses_close(gloo, links, 1e-2);
  const auto launched = run_job(dir, "launch --nproc-per-node 2 -- " + job + "--cpu-collectives links", "launched");
  check_same(dir, "links", "launched");
}

// Two network namespaces joined by a veth pair, one replica in each: the ranks advertise
// non-loopback addresses, so `auto` reduces over the links, and the result is the embedded one's.
BOOST_AUTO_TEST_CASE(auto_takes_the_links_between_two_hosts_when_root) {
  pw::test::TwoHostNamespaces hosts("pl", 9);
  const std::string& a = hosts.a();
  const std::string& b = hosts.b();
  const bool made = hosts.made();
  if (!made) {
    BOOST_TEST_MESSAGE("skipped: network namespaces need root and `ip netns`");
    return;
  }
  ScratchDir dir("link-collectives-netns");
  const std::string job = kJob + "--replicas 2 ";
  run_job(dir, "train " + job + "--cpu-collectives links", "one");
  const std::string launch = " env PW_JOB_TOKEN=feedfacefeedfac3 " + pw::test::pipewright_binary() +
                             " launch --nnodes 2 --nproc-per-node 1 --master 10.213.9.1:29521 --plain-links";   // two hosts, no TLS
  BackgroundCommand node1("ip netns exec " + b + launch + " --node-rank 1 -- " + job, dir.file("node1.log"));
  BackgroundCommand node0("ip netns exec " + a + launch + " --node-rank 0 -- " + job + "--summary " +
                              dir.file("multi.json") + " --save " + dir.file("multi.safetensors"),
                          dir.file("node0.log"));
  BOOST_REQUIRE_MESSAGE(node0.wait(std::chrono::seconds(120)).value_or(-1) == 0, node0.output());
  BOOST_REQUIRE_MESSAGE(node1.wait(std::chrono::seconds(30)).value_or(-1) == 0, node1.output());
  const auto j = read_json(dir.file("multi.json"));
  BOOST_TEST(j["collectives"] == "links");
  BOOST_TEST(j["rank_addresses"][1].get<std::string>().rfind("10.213.9.2:", 0) == 0, j["rank_addresses"].dump());
  check_same(dir, "one", "multi");
}

BOOST_AUTO_TEST_SUITE_END()
