// Multi-process jobs: `pipewright launch` and ranks started by other launchers' environments give
// the same results as the embedded pipeline, bitwise on CPU; a killed or hung rank stops every
// other rank with a message naming it; bad launch input gets one-line errors.
#include <netinet/in.h>
#include <sys/socket.h>

#include <chrono>
#include <fstream>
#include <iterator>

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "tests/tools/background_command.h"
#include "tests/tools/cli_runner.h"
#include "tests/tools/network_namespaces.h"
#include "tests/tools/job_outputs.h"

using pw::test::BackgroundCommand;
using pw::test::check_same;
using pw::test::free_port;
using pw::test::read_file;
using pw::test::read_json;
using pw::test::run_pipewright;
using pw::test::ScratchDir;

namespace {

const std::string kJob =
    "--model seed-cnn --dataset synthetic --synthetic-size 256 --batch-size 32 --seed 3 --threads 1 "
    "--eval-batches 2 --steps 5 ";
// Long enough to be killed in the middle.
const std::string kLongJob =
    "--model seed-cnn --dataset synthetic --synthetic-size 4096 --batch-size 32 --threads 1 --epochs 100 "
    "--log-every 1 --stages 4 --micro-batches 4 ";

// The embedded (one process) run the multi-process runs must reproduce.
nlohmann::json embedded(const ScratchDir& dir, const std::string& args, const std::string& name) {
  const auto r = run_pipewright("train " + kJob + args + " --summary " + dir.file(name + ".json") + " --save " +
                                dir.file(name + ".safetensors"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  return read_json(dir.file(name + ".json"));
}

// Nobody listens on the port (connections of the dead job may linger in TIME_WAIT; servers
// rebind over those, as this check does with SO_REUSEADDR).
bool port_is_free(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  const int on = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

// The launcher's ranks' pids, indexed by rank.
std::vector<pid_t> ranks_of(const BackgroundCommand& launcher) {
  std::vector<pid_t> by_rank(4, -1);
  for (pid_t pid : launcher.children()) {
    const int rank = pw::test::rank_of(pid);
    if (rank >= 0 && rank < 4) by_rank[static_cast<std::size_t>(rank)] = pid;
  }
  for (pid_t pid : by_rank) BOOST_REQUIRE_MESSAGE(pid > 0, "could not find every rank's process");
  return by_rank;
}


}  // namespace

BOOST_AUTO_TEST_SUITE(launch)

BOOST_AUTO_TEST_CASE(four_processes_over_thrift_match_the_embedded_pipeline_bitwise) {
  ScratchDir dir("launch4");
  for (const std::string args : {"--stages 4 --micro-batches 4", "--stages 2 --micro-batches 4 --schedule interleaved "
                                                                 "--chunks 2 --split 2,4,6"}) {
    BOOST_TEST_CONTEXT(args) {
      embedded(dir, args, "one");
      const int ranks = args.find("--stages 4") != std::string::npos ? 4 : 2;
      const auto r = run_pipewright("launch --nproc-per-node " + std::to_string(ranks) + " -- " + kJob + args +
                                    " --summary " + dir.file("multi.json") + " --save " + dir.file("multi.safetensors"));
      BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
      BOOST_TEST(r.output.find("all " + std::to_string(ranks) + " ranks finished") != std::string::npos, r.output);
      BOOST_TEST(r.output.find("[rank 1] pipewright train:") != std::string::npos, r.output);
      check_same(dir, "one", "multi");
      const auto j = read_json(dir.file("multi.json"));
      BOOST_TEST(j["world_size"] == ranks);
      BOOST_TEST(j["transport"] == "thrift");
      BOOST_TEST(j["stage_busy_fraction"].size() == static_cast<std::size_t>(ranks));
    }
  }
}

BOOST_AUTO_TEST_CASE(ranks_started_by_srun_or_mpirun_environments_need_no_launcher) {
  ScratchDir dir("envs");
  embedded(dir, "--stages 2", "one");
  const std::string common = "MASTER_ADDR=127.0.0.1 PW_JOB_TOKEN=0123456789abcdef ";
  const std::string slurm = "SLURM_STEP_ID=0 SLURM_NTASKS=2 SLURM_PROCID=";
  const std::string mpi = "OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=";
  for (const auto& [name, rank_var] : {std::pair{"Slurm", slurm}, std::pair{"Open MPI", mpi}}) {
    BOOST_TEST_CONTEXT(name) {
      const std::string port = "MASTER_PORT=" + std::to_string(free_port()) + " ";
      const std::string train = pw::test::pipewright_binary() + " train " + kJob + "--stages 2 ";
      BackgroundCommand rank1("env " + common + port + rank_var + "1 " + train, dir.file("rank1.log"));
      BackgroundCommand rank0("env " + common + port + rank_var + "0 " + train + "--summary " + dir.file("multi.json") +
                                  " --save " + dir.file("multi.safetensors"),
                              dir.file("rank0.log"));
      BOOST_REQUIRE_EQUAL(rank0.wait(std::chrono::seconds(120)).value_or(-1), 0);
      BOOST_REQUIRE_EQUAL(rank1.wait(std::chrono::seconds(30)).value_or(-1), 0);
      BOOST_TEST(rank0.output().find(std::string("(") + name + ")") != std::string::npos, rank0.output());
      check_same(dir, "one", "multi");
    }
  }
}

BOOST_AUTO_TEST_CASE(two_launchers_as_two_nodes_on_loopback) {
  ScratchDir dir("nodes");
  embedded(dir, "--stages 4", "one");
  const std::string master = "127.0.0.1:" + std::to_string(free_port());
  const std::string launch = "env PW_JOB_TOKEN=feedfacefeedface " + pw::test::pipewright_binary() +
                             " launch --nnodes 2 --nproc-per-node 2 --master " + master;
  BackgroundCommand node1(launch + " --node-rank 1 -- " + kJob + "--stages 4", dir.file("node1.log"));
  BackgroundCommand node0(launch + " --node-rank 0 -- " + kJob + "--stages 4 --summary " + dir.file("multi.json") +
                              " --save " + dir.file("multi.safetensors"),
                          dir.file("node0.log"));
  BOOST_REQUIRE_MESSAGE(node0.wait(std::chrono::seconds(120)).value_or(-1) == 0, node0.output());
  BOOST_REQUIRE_MESSAGE(node1.wait(std::chrono::seconds(30)).value_or(-1) == 0, node1.output());
  BOOST_TEST(node1.output().find("[rank 3] ") != std::string::npos, node1.output());
  check_same(dir, "one", "multi");
}

// Two network namespaces joined by a veth pair: the ranks of each "node" have their own address.
BOOST_AUTO_TEST_CASE(two_nodes_in_network_namespaces_when_root) {
  pw::test::TwoHostNamespaces hosts("pw", 7);
  const std::string& a = hosts.a();
  const std::string& b = hosts.b();
  const bool made = hosts.made();
  if (!made) {
    BOOST_TEST_MESSAGE("skipped: network namespaces need root and `ip netns` (two launchers on loopback cover the rest)");
    return;
  }
  ScratchDir dir("netns");
  embedded(dir, "--stages 4", "one");
  const std::string launch = " env PW_JOB_TOKEN=feedfacefeedface " + pw::test::pipewright_binary() +
                             " launch --nnodes 2 --nproc-per-node 2 --master 10.213.7.1:29517";
  // Two hosts without TLS: plain links must be asked for (docs/running_safely.md#the-job-token).
  BackgroundCommand node1("ip netns exec " + b + launch + " --node-rank 1 -- " + kJob + "--stages 4 --plain-links",
                          dir.file("node1.log"));
  BackgroundCommand node0("ip netns exec " + a + launch + " --node-rank 0 -- " + kJob + "--stages 4 --plain-links --summary " +
                              dir.file("multi.json") + " --save " + dir.file("multi.safetensors"),
                          dir.file("node0.log"));
  BOOST_REQUIRE_MESSAGE(node0.wait(std::chrono::seconds(120)).value_or(-1) == 0, node0.output());
  BOOST_REQUIRE_MESSAGE(node1.wait(std::chrono::seconds(30)).value_or(-1) == 0, node1.output());
  check_same(dir, "one", "multi");
  const auto j = read_json(dir.file("multi.json"));
  BOOST_TEST(j["rank_addresses"][0].get<std::string>().rfind("10.213.7.1:", 0) == 0, j["rank_addresses"].dump());
  BOOST_TEST(j["rank_addresses"][3].get<std::string>().rfind("10.213.7.2:", 0) == 0, j["rank_addresses"].dump());
}

BOOST_AUTO_TEST_CASE(a_killed_rank_stops_every_other_rank_within_ten_seconds) {
  // Rank 2 is an ordinary stage; rank 0 also serves the rendezvous.
  for (const int victim : {2, 0}) {
    BOOST_TEST_CONTEXT("rank " << victim << " killed") {
      ScratchDir dir("kill" + std::to_string(victim));
      const int port = free_port();
      // A long grace: the ranks must stop by themselves, not be killed by the launcher.
      BackgroundCommand job(pw::test::pipewright_binary() + " launch --grace 60 --nproc-per-node 4 --master 127.0.0.1:" +
                                std::to_string(port) + " -- " + kLongJob,
                            dir.file("job.log"));
      BOOST_REQUIRE_MESSAGE(job.wait_for_output("[rank 0] step ", std::chrono::seconds(120), 3), job.output());
      const auto ranks = ranks_of(job);
      kill(ranks[static_cast<std::size_t>(victim)], SIGKILL);
      const auto killed_at = std::chrono::steady_clock::now();
      const auto status = job.wait(std::chrono::seconds(30));
      const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
      BOOST_REQUIRE_MESSAGE(status.has_value(), "the job still runs 30 s after a rank was killed:\n" << job.output());
      const auto out = job.output();
      const std::string lost = "rank " + std::to_string(victim);
      BOOST_TEST(*status != 0);
      BOOST_TEST(took < 10.0, "the job took " << took << " s to stop");
      BOOST_TEST(out.find(lost + " (pid " + std::to_string(ranks[static_cast<std::size_t>(victim)]) +
                          ") was killed by signal 9 (SIGKILL)") != std::string::npos,
                 out);
      BOOST_TEST(out.find("job failed: " + lost + " was killed by signal 9") != std::string::npos, out);
      for (int survivor = 0; survivor < 4; ++survivor) {
        if (survivor == victim) continue;
        const std::string prefix = "[rank " + std::to_string(survivor) + "] pipewright: stopped: ";
        const auto at = out.find(prefix);
        BOOST_TEST_REQUIRE(at != std::string::npos, out);
        const auto line = out.substr(at, out.find('\n', at) - at);
        BOOST_TEST(line.find(lost + " (stage " + std::to_string(victim) + ") was lost") != std::string::npos, line);
        // What this rank was doing: its stage, the step, and the instruction or exchange it was in.
        BOOST_TEST(line.find("stage " + std::to_string(survivor) + " (cpu:0), step ") != std::string::npos, line);
      }
      for (pid_t pid : ranks) BOOST_TEST(!pw::test::process_exists(pid), "rank pid " << pid << " is still there");
      BOOST_TEST(port_is_free(port), "the rendezvous port is still bound");
    }
  }
}

BOOST_AUTO_TEST_CASE(a_hung_rank_stops_the_job_after_the_heartbeat_timeout) {
  ScratchDir dir("hang");
  BackgroundCommand job(pw::test::pipewright_binary() + " launch --grace 1 --nproc-per-node 4 -- " + kLongJob +
                            "--heartbeat-timeout 2",
                        dir.file("job.log"));
  BOOST_REQUIRE_MESSAGE(job.wait_for_output("[rank 0] step ", std::chrono::seconds(120), 3), job.output());
  const auto ranks = ranks_of(job);
  kill(ranks[1], SIGSTOP);
  const auto status = job.wait(std::chrono::seconds(30));
  BOOST_REQUIRE_MESSAGE(status.has_value(), "the job still runs 30 s after a rank hung:\n" << job.output());
  const auto out = job.output();
  // A wait ran past its timeout (the heartbeat's): status 4, naming the stopped rank as stopped,
  // not as the echo the others' status 5 would be.
  BOOST_TEST(*status == 4, out);
  BOOST_TEST(out.find("rank 1 (pid " + std::to_string(ranks[1]) +
                      ") stopped (no heartbeat): stopped by signal 19 (SIGSTOP)") != std::string::npos,
             out);
  BOOST_TEST(out.find("job failed: rank 1 stopped (no heartbeat)") != std::string::npos, out);
  BOOST_TEST(out.find("rank 1 (stage 1) stopped answering: no heartbeat for") != std::string::npos, out);
  BOOST_TEST(out.find("[rank 3] pipewright: stopped: ") != std::string::npos, out);
  for (pid_t pid : ranks) BOOST_TEST(!pw::test::process_exists(pid), "rank pid " << pid << " is still there");
}

BOOST_AUTO_TEST_CASE(bad_launch_input_gets_one_line_errors) {
  auto r = run_pipewright("launch --nnodes 2 --node-rank 2 -- " + kJob);
  BOOST_TEST(r.status == 2);
  BOOST_TEST(r.output.find("--node-rank: 2 outside --nnodes 2") != std::string::npos, r.output);
  r = run_pipewright("launch --nnodes 2 --node-rank 0 -- " + kJob);
  BOOST_TEST(r.status == 2);
  BOOST_TEST(r.output.find("needs the same job token on every node") != std::string::npos, r.output);
  r = run_pipewright("launch --nproc-per-node 2 -- launch");
  BOOST_TEST(r.status == 2);
  // A stage count that does not match the ranks: every rank says so, the launcher reports it.
  r = run_pipewright("launch --nproc-per-node 2 -- " + kJob + "--stages 3 --micro-batches 4");
  BOOST_TEST(r.status == 2, r.output);
  BOOST_TEST(r.output.find("this job has 2 ranks (torchrun-style environment) but --stages 3") != std::string::npos,
             r.output);
  BOOST_TEST(r.output.find("job failed: rank") != std::string::npos, r.output);
  // A rank environment without a token or a master.
  const auto no_token = std::system(("env WORLD_SIZE=2 RANK=1 MASTER_ADDR=127.0.0.1 " + pw::test::pipewright_binary() +
                                     " train " + kJob + "--stages 2 > /dev/null 2>&1")
                                        .c_str());
  BOOST_TEST(WEXITSTATUS(no_token) == 2);
  // Timeouts out of range are refused by the flag parser before anything starts.
  r = run_pipewright("train " + kJob + "--stages 2 --heartbeat-timeout 0");
  BOOST_TEST(r.status != 0);
  BOOST_TEST(r.output.find("--heartbeat-timeout") != std::string::npos, r.output);
  r = run_pipewright("train " + kJob + "--stages 2 --startup-timeout -1");
  BOOST_TEST(r.status != 0);
  BOOST_TEST(r.output.find("--startup-timeout") != std::string::npos, r.output);
  // Servers for a model that keeps no table on them: refused before any starts, as train --ps is.
  r = run_pipewright("launch --nproc-per-node 1 --ps 1 -- " + kJob);
  BOOST_TEST(r.status == 2, r.output);
  BOOST_TEST(r.output.find("--ps: parameter servers hold embedding tables, and model seed-cnn keeps none on them") !=
                 std::string::npos, r.output);
}

BOOST_AUTO_TEST_SUITE_END()
