// Jobs under mutual TLS (--tls-cert/--tls-key/--tls-ca, or PW_TLS_* as the launcher passes them),
// on loopback with a CA the test makes: a two-process job trains bitwise as without TLS; a rank
// with a certificate of another CA is refused in one line with status 2; bad TLS flags are one line.
#include <chrono>
#include <string>

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "tests/support/test_pki.h"
#include "tests/tools/background_command.h"
#include "tests/tools/cli_runner.h"
#include "tests/tools/job_outputs.h"

using pw::test::BackgroundCommand;
using pw::test::check_same;
using pw::test::free_port;
using pw::test::read_json;
using pw::test::run_command;
using pw::test::run_pipewright;
using pw::test::ScratchDir;

namespace {

const std::string kJob =
    "--model seed-cnn --dataset synthetic --synthetic-size 256 --batch-size 32 --seed 3 --threads 1 "
    "--eval-batches 2 --steps 5 --stages 2 --micro-batches 2 ";

std::string outputs(const ScratchDir& dir, const std::string& name) {
  return " --summary " + dir.file(name + ".json") + " --save " + dir.file(name + ".safetensors");
}

int count_lines(const std::string& text, const std::string& part) {
  int n = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(tls_job)

BOOST_AUTO_TEST_CASE(a_two_process_job_under_tls_trains_bitwise_as_without) {
  ScratchDir dir("tls_job");
  pw::test::TestPki pki("job");
  const auto plain = run_pipewright("launch --nproc-per-node 2 -- train " + kJob + outputs(dir, "plain"));
  BOOST_REQUIRE_MESSAGE(plain.status == 0, plain.output);
  // Flags to the launcher: every rank gets the files as PW_TLS_*.
  const auto tls = run_pipewright("launch --nproc-per-node 2 " + pki.flags() + "-- train " + kJob + outputs(dir, "tls"));
  BOOST_REQUIRE_MESSAGE(tls.status == 0, tls.output);
  check_same(dir, "plain", "tls");
  BOOST_TEST(read_json(dir.file("tls.json"))["transport"] == "thrift");
  // The environment alone does the same (as a launcher other than pipewright's would set it).
  const auto by_env = run_command("env PW_TLS_CERT=" + pki.cert() + " PW_TLS_KEY=" + pki.key() + " PW_TLS_CA=" +
                                  pki.ca() + " " + pw::test::pipewright_binary() + " launch --nproc-per-node 2 -- train " +
                                  kJob + outputs(dir, "env"));
  BOOST_REQUIRE_MESSAGE(by_env.status == 0, by_env.output);
  check_same(dir, "plain", "env");
  // Ranks as threads with Thrift links on loopback, under TLS: the same bits again.
  const auto threads = run_pipewright("train " + kJob + "--transport thrift " + pki.flags() + outputs(dir, "threads"));
  BOOST_REQUIRE_MESSAGE(threads.status == 0, threads.output);
  check_same(dir, "plain", "threads");
}

BOOST_AUTO_TEST_CASE(launched_parameter_servers_and_workers_under_tls_train_as_without) {
  ScratchDir dir("tls_ps");
  pw::test::TestPki pki("ps_job");
  const std::string job = "-- train --model dlrm --dataset synthetic-clicks --synthetic-size 4000 --threads 1 "
                          "--optimizer sgd --momentum 0 --lr 0.1 --steps 12 --replicas 2 --summary ";
  const auto plain = run_pipewright("launch --ps 2 --nproc-per-node 2 " + job + dir.file("plain.json"));
  BOOST_REQUIRE_MESSAGE(plain.status == 0, plain.output);
  const auto tls = run_pipewright("launch --ps 2 --nproc-per-node 2 " + pki.flags() + job + dir.file("tls.json"));
  BOOST_REQUIRE_MESSAGE(tls.status == 0, tls.output);
  BOOST_TEST(tls.output.find("mutual TLS") != std::string::npos, tls.output);   // the servers say so
  const auto a = read_json(dir.file("plain.json")), b = read_json(dir.file("tls.json"));
  BOOST_TEST(a["loss_history"] == b["loss_history"]);
  BOOST_TEST(a["test_auc"] == b["test_auc"]);
}

// Two launchers as two nodes with restarts: their own rendezvous and heartbeats (node agents) run
// over TLS too, and the ranks train bitwise as one process does.
BOOST_AUTO_TEST_CASE(two_launchers_with_restarts_meet_over_tls) {
  ScratchDir dir("tls_nodes");
  pw::test::TestPki pki("nodes");
  const auto one = run_pipewright("train " + kJob + outputs(dir, "one"));
  BOOST_REQUIRE_MESSAGE(one.status == 0, one.output);
  const std::string launch = "env PW_JOB_TOKEN=feedfacefeedface " + pw::test::pipewright_binary() +
                             " launch --nnodes 2 --nproc-per-node 1 --max-restarts 1 --node-timeout 60 --master 127.0.0.1:" +
                             std::to_string(free_port()) + " " + pki.flags();
  BackgroundCommand node1(launch + "--node-rank 1 -- train " + kJob, dir.file("node1.log"));
  BackgroundCommand node0(launch + "--node-rank 0 -- train " + kJob + outputs(dir, "multi"), dir.file("node0.log"));
  BOOST_REQUIRE_MESSAGE(node0.wait(std::chrono::seconds(180)).value_or(-1) == 0, node0.output());
  BOOST_REQUIRE_MESSAGE(node1.wait(std::chrono::seconds(60)).value_or(-1) == 0, node1.output());
  BOOST_TEST(node0.output().find("every node's launcher joined") != std::string::npos, node0.output());
  check_same(dir, "one", "multi");
}

BOOST_AUTO_TEST_CASE(a_rank_with_a_certificate_of_another_ca_is_refused_in_one_line) {
  ScratchDir dir("tls_stranger");
  pw::test::TestPki pki("stranger");
  const std::string env = "MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(free_port()) +
                          " PW_JOB_TOKEN=0123456789abcdef WORLD_SIZE=2 ";
  const std::string train = pw::test::pipewright_binary() + " train " + kJob + "--startup-timeout 8 ";
  BackgroundCommand rank0("env " + env + "RANK=0 " + train + pki.flags(), dir.file("rank0.log"));
  const auto rank1 = run_command("env " + env + "RANK=1 " + train + "--tls-cert " + pki.stranger_cert() +
                                 " --tls-key " + pki.stranger_key() + " --tls-ca " + pki.foreign_ca());
  BOOST_TEST(rank1.status == 2, rank1.output);
  BOOST_TEST(count_lines(rank1.output, "pipewright: error: ") == 1, rank1.output);
  BOOST_TEST(rank1.output.find("rendezvous at 127.0.0.1:") != std::string::npos, rank1.output);
  BOOST_TEST(rank1.output.find("TLS handshake failed: certificate verify failed") != std::string::npos, rank1.output);
  // Rank 0 logs one line per refused connection (rank 1 tried to register, then to report why it
  // stopped) and gives up at its start-up timeout.
  const auto status0 = rank0.wait(std::chrono::seconds(60));
  BOOST_TEST(status0.value_or(0) != 0, rank0.output());
  const int refused = count_lines(rank0.output(), "refused a connection from 127.0.0.1:");
  BOOST_TEST(refused >= 1, rank0.output());
  BOOST_TEST(count_lines(rank0.output(), ": TLS handshake failed: ") == refused, rank0.output());
  BOOST_TEST_MESSAGE("rank 1 said: " << rank1.output);
}

BOOST_AUTO_TEST_CASE(tls_flags_are_all_three_or_none_and_files_are_checked) {
  pw::test::TestPki pki("flags");
  const std::string job = "train --model seed-cnn --dataset synthetic --synthetic-size 64 --steps 1 --threads 1 ";
  struct Case {
    std::string args, says;
  };
  for (const auto& c : {Case{"--tls-cert " + pki.cert(), "pipewright: error: --tls-key: missing; TLS needs all three of "
                                                         "--tls-cert, --tls-key and --tls-ca"},
                        Case{"--tls-cert " + pki.cert() + " --tls-key " + pki.stranger_key() + " --tls-ca " + pki.ca(),
                             "pipewright: error: TLS key " + pki.stranger_key() + ": not the key of the certificate"},
                        Case{"--tls-cert /nonexistent.pem --tls-key " + pki.key() + " --tls-ca " + pki.ca(),
                             "pipewright: error: TLS certificate /nonexistent.pem: no such file"}}) {
    for (const std::string command : {job, "launch --nproc-per-node 2 -- " + job}) {
      BOOST_TEST_CONTEXT(command + c.args) {
        const std::string args = command.rfind("launch", 0) == 0
                                     ? "launch --nproc-per-node 2 " + c.args + " -- " + job
                                     : job + c.args;
        const auto r = run_pipewright(args);
        BOOST_TEST(r.status == 2, r.output);
        BOOST_TEST(r.output.find(c.says) != std::string::npos, r.output);
        BOOST_TEST(count_lines(r.output, "\n") == 1, r.output);
      }
    }
  }
  // ps serve takes the same flags.
  const auto ps = run_command("env PW_JOB_TOKEN=0123456789abcdef " + pw::test::pipewright_binary() +
                              " ps serve --tls-cert " + pki.cert());
  BOOST_TEST(ps.status == 2, ps.output);
  BOOST_TEST(ps.output.find("--tls-key: missing") != std::string::npos, ps.output);
}

// Ranks on two hosts (127.0.0.1 and 127.0.0.2: both loopback here, two hosts to the job) refuse to
// start without TLS, each in one line naming the hosts and what to give; --plain-links lets them run.
BOOST_AUTO_TEST_CASE(ranks_on_two_hosts_refuse_plain_links_unless_asked_for) {
  ScratchDir dir("tls_hosts");
  const auto job = [&](const std::string& extra, const std::string& name) {
    const std::string env = "MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(free_port()) +
                            " PW_JOB_TOKEN=0123456789abcdef WORLD_SIZE=2 ";
    const std::string train = pw::test::pipewright_binary() + " train " + kJob + "--startup-timeout 20 " + extra;
    BackgroundCommand rank0("env " + env + "RANK=0 PW_ADVERTISE_ADDR=127.0.0.1 " + train, dir.file(name + "0.log"));
    const auto rank1 = run_command("env " + env + "RANK=1 PW_ADVERTISE_ADDR=127.0.0.2 " + train);
    const auto status0 = rank0.wait(std::chrono::seconds(120));
    return std::tuple{status0.value_or(-1), rank0.output(), rank1};
  };
  const auto [status0, output0, rank1] = job("", "plain");
  for (const auto& [status, output] : {std::pair{status0, output0}, std::pair{rank1.status, rank1.output}}) {
    BOOST_TEST(status == 2, output);
    BOOST_TEST(count_lines(output, "pipewright: error: ") == 1, output);
    BOOST_TEST(output.find("ranks are on 2 hosts (127.0.0.1, 127.0.0.2)") != std::string::npos, output);
    BOOST_TEST(output.find("--plain-links") != std::string::npos, output);
  }
  const auto [allowed0, allowed_output0, allowed1] = job("--plain-links", "allowed");
  BOOST_TEST(allowed0 == 0, allowed_output0);
  BOOST_TEST(allowed1.status == 0, allowed1.output);
}

BOOST_AUTO_TEST_SUITE_END()
