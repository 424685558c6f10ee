// `pipewright launch --max-restarts K`: a failed attempt (a rank that exits non-zero or is killed)
// stops the other ranks, then every rank starts again with PW_RESTART_COUNT and PW_RESTART_CAUSES,
// at most K times; no process of an attempt outlives it; after K restarts the launcher fails with
// the last cause. With --nnodes > 1 the launchers restart together. The rank programs are small
// shell scripts that follow a plan per (attempt, rank); one test restarts a real training job.
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "rpc/launch_env.h"
#include "tests/tools/background_command.h"
#include "tests/tools/cli_runner.h"
#include "tests/tools/job_outputs.h"

using pw::test::BackgroundCommand;
using pw::test::free_port;
using pw::test::read_file;
using pw::test::read_json;
using pw::test::run_command;
using pw::test::run_pipewright;
using pw::test::ScratchDir;
using namespace std::chrono_literals;

namespace {

// A rank program. In attempt n (PW_RESTART_COUNT), rank r does what the line "n:r ACTION" of the
// plan says: "exit N", "kill9" (SIGKILL itself, once another rank of that attempt sleeps) or "sleep"
// (60 s, in a child process); nothing: exit 0. Every rank records, per attempt: its pid
// (pid.n.r), the count (counts.r), PW_RESTART_CAUSES (causes.n.r), PW_MAX_RESTARTS, and any
// process of an earlier attempt still alive (overlap).
std::string rank_script(const ScratchDir& dir, const std::string& plan) {
  std::ofstream(dir.file("plan")) << plan;
  const std::string path = dir.file("rank.sh");
  std::ofstream(path) << R"(#!/bin/sh
d=')" << dir.path.string() << R"('
n=${PW_RESTART_COUNT:-0}
echo $$ > "$d/pid.$n.$RANK"
echo "$n" >> "$d/counts.$RANK"
printf '%s\n' "$PW_RESTART_CAUSES" > "$d/causes.$n.$RANK"
printf '%s\n' "$PW_MAX_RESTARTS" > "$d/max.$RANK"
k=0
while [ "$k" -lt "$n" ]; do
  for f in "$d"/pid.$k.*; do
    [ -e "$f" ] || continue
    p=$(cat "$f")
    if kill -0 "$p" 2>/dev/null; then echo "attempt $n rank $RANK: $f (pid $p) still runs" >> "$d/overlap"; fi
  done
  k=$((k + 1))
done
action=$(sed -n "s/^$n:$RANK //p" "$d/plan")
echo "rank $RANK attempt $n: ${action:-ok}"
case "$action" in
  exit*) exit ${action#exit } ;;
  kill9)
    i=0
    while ! ls "$d"/pid.$n.*.child > /dev/null 2>&1 && [ "$i" -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
    kill -9 $$ ;;
  sleep)
    sleep 60 &
    echo $! > "$d/pid.$n.$RANK.child"
    wait ;;
esac
exit 0
)";
  chmod(path.c_str(), 0755);
  return path;
}

std::string lines_of(const std::string& path) { return read_file(path); }

std::vector<std::string> causes_seen(const ScratchDir& dir, int attempt, int rank) {
  const std::string text = read_file(dir.file("causes." + std::to_string(attempt) + "." + std::to_string(rank)));
  BOOST_REQUIRE_MESSAGE(!text.empty(), "rank " << rank << " left no causes for attempt " << attempt);
  return nlohmann::json::parse(text).get<std::vector<std::string>>();
}

std::string pid_of(const ScratchDir& dir, int attempt, int rank) {
  std::string pid = read_file(dir.file("pid." + std::to_string(attempt) + "." + std::to_string(rank)));
  while (!pid.empty() && pid.back() == '\n') pid.pop_back();
  return pid;
}

// Kills what the scripts left sleeping should a test fail half-way.
struct KillLeftovers {
  const ScratchDir& dir;
  ~KillLeftovers() {
    for (const auto& entry : std::filesystem::directory_iterator(dir.path)) {
      if (entry.path().filename().string().rfind("pid.", 0) != 0) continue;
      std::ifstream in(entry.path());
      pid_t pid = 0;
      if (in >> pid && pid > 1) kill(pid, SIGKILL);
    }
  }
};

// The plan both single-node tests use: attempt 0, rank 1 is killed by SIGKILL while rank 0 sleeps;
// attempt 1, rank 0 exits 3 while rank 1 sleeps; attempt 2 succeeds.
const std::string kPlan = "0:0 sleep\n0:1 kill9\n1:0 exit 3\n1:1 sleep\n";

}  // namespace

BOOST_AUTO_TEST_SUITE(launch_restarts)

BOOST_AUTO_TEST_CASE(restart_causes_round_trip_as_a_json_array_of_strings) {
  const std::vector<std::string> causes = {"attempt 0: rank 1 (pid 12) was killed by signal 9 (SIGKILL)",
                                           "quotes \" and \\ backslash", "tab\there, a newline\nand \x01 control",
                                           "caf\xc3\xa9", ""};
  const std::string json = pw::rpc::restart_causes_json(causes);
  BOOST_TEST(json.find('\n') == std::string::npos, json);
  BOOST_TEST(nlohmann::json::parse(json).get<std::vector<std::string>>() == causes);
  BOOST_TEST(pw::rpc::parse_restart_causes(json) == causes);
  BOOST_TEST(pw::rpc::restart_causes_json({}) == "[]");
  BOOST_TEST(pw::rpc::parse_restart_causes(" [ ] ").empty());
  BOOST_TEST(pw::rpc::parse_restart_causes(R"(["\u00e9\ud83d\ude00"])") ==
             std::vector<std::string>{"\xc3\xa9\xf0\x9f\x98\x80"});
  for (const char* bad : {"", "[", "[\"a\"", "[\"a\",]", "[1]", "[\"a\"] x", "[\"\\q\"]", "{}"}) {
    BOOST_TEST_CONTEXT(bad) {
      try {
        pw::rpc::parse_restart_causes(bad);
        BOOST_ERROR("accepted");
      } catch (const pw::InputError& e) {
        BOOST_TEST(std::string(e.what()).find("PW_RESTART_CAUSES") != std::string::npos, e.what());
      }
    }
  }
  const auto env = pw::rpc::restart_env_from([](const char* name) -> const char* {
    const std::string n = name;
    if (n == "PW_RESTART_COUNT") return "2";
    if (n == "PW_MAX_RESTARTS") return "3";
    if (n == "PW_RESTART_CAUSES") return R"(["a", "b"])";
    return nullptr;
  });
  BOOST_TEST(env.count == 2);
  BOOST_TEST(env.max_restarts == 3);
  BOOST_TEST(env.causes == (std::vector<std::string>{"a", "b"}));
  const auto none = pw::rpc::restart_env_from([](const char*) -> const char* { return nullptr; });
  BOOST_TEST(none.count == 0);
  BOOST_TEST(none.causes.empty());
  BOOST_CHECK_THROW(pw::rpc::restart_env_from([](const char* name) -> const char* {
                      return std::string(name) == "PW_RESTART_COUNT" ? "-1" : nullptr;
                    }),
                    pw::InputError);
}

BOOST_AUTO_TEST_CASE(failing_attempts_restart_every_rank_until_one_succeeds) {
  ScratchDir dir("restart_ok");
  KillLeftovers cleanup{dir};
  const std::string script = rank_script(dir, kPlan);
  const auto r = run_pipewright("launch --grace 1 --max-restarts 2 --nproc-per-node 2 -- " + script);
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  // Every rank ran in attempts 0, 1 and 2, and saw the count.
  BOOST_TEST(lines_of(dir.file("counts.0")) == "0\n1\n2\n", r.output);
  BOOST_TEST(lines_of(dir.file("counts.1")) == "0\n1\n2\n", r.output);
  BOOST_TEST(lines_of(dir.file("max.0")) == "2\n");
  // No process of attempt n (a rank or what it started) was alive when attempt n+1 started.
  BOOST_TEST(!std::filesystem::exists(dir.file("overlap")), read_file(dir.file("overlap")));
  // The causes, oldest first, the same on every rank; none on the first attempt.
  const std::string killed = "attempt 0: rank 1 (pid " + pid_of(dir, 0, 1) + ") was killed by signal 9 (SIGKILL)";
  const std::string exited = "attempt 1: rank 0 (pid " + pid_of(dir, 1, 0) + ") exited with status 3";
  for (int rank = 0; rank < 2; ++rank) {
    BOOST_TEST(causes_seen(dir, 0, rank).empty());
    BOOST_TEST(causes_seen(dir, 1, rank) == std::vector<std::string>{killed});
    BOOST_TEST(causes_seen(dir, 2, rank) == (std::vector<std::string>{killed, exited}));
  }
  BOOST_TEST(r.output.find(killed + "; restart 1 of 2: starting ranks 0-1 again") != std::string::npos, r.output);
  BOOST_TEST(r.output.find(exited + "; restart 2 of 2: starting ranks 0-1 again") != std::string::npos, r.output);
  BOOST_TEST(r.output.find("all 2 ranks finished (after 2 restarts)") != std::string::npos, r.output);
  BOOST_TEST(r.output.find("[rank 1] rank 1 attempt 2: ok") != std::string::npos, r.output);
}

BOOST_AUTO_TEST_CASE(the_launcher_fails_with_the_last_cause_once_no_restart_is_left) {
  ScratchDir dir("restart_out");
  KillLeftovers cleanup{dir};
  const std::string script = rank_script(dir, kPlan);
  const auto r = run_pipewright("launch --grace 1 --max-restarts 1 --nproc-per-node 2 -- " + script);
  BOOST_TEST(r.status == 3, r.output);   // the status of the rank that failed last
  BOOST_TEST(lines_of(dir.file("counts.0")) == "0\n1\n", r.output);
  BOOST_TEST(lines_of(dir.file("counts.1")) == "0\n1\n", r.output);
  BOOST_TEST(!std::filesystem::exists(dir.file("overlap")), read_file(dir.file("overlap")));
  const std::string last = "job failed after 1 restart (--max-restarts 1): attempt 1: rank 0 (pid " + pid_of(dir, 1, 0) +
                           ") exited with status 3\n";
  BOOST_TEST(r.output.find(last) != std::string::npos, r.output);
  // Without restarts (the default) the first failure ends the job, as before.
  ScratchDir once("restart_none");
  KillLeftovers cleanup_once{once};
  const auto r0 = run_pipewright("launch --grace 1 --nproc-per-node 2 -- " + rank_script(once, kPlan));
  BOOST_TEST(r0.status == 128 + SIGKILL, r0.output);
  BOOST_TEST(r0.output.find("rank 1 (pid " + pid_of(once, 0, 1) + ") was killed by signal 9 (SIGKILL)") != std::string::npos,
             r0.output);
  BOOST_TEST(r0.output.find("job failed: rank 1 was killed by signal 9 (SIGKILL)") != std::string::npos, r0.output);
  BOOST_TEST(lines_of(once.file("counts.0")) == "0\n");
  BOOST_TEST(causes_seen(once, 0, 0).empty());
  BOOST_TEST(lines_of(once.file("max.0")) == "0\n");
  // The sleeping rank's child went with it.
  BOOST_TEST(!pw::test::process_exists(std::stoi(read_file(once.file("pid.0.0.child")))));
}

// A real job of two ranks on a fixed --master port: rank 1 is killed mid-training; the second
// attempt's rank 0 serves the rendezvous on the same port and the job finishes.
BOOST_AUTO_TEST_CASE(a_training_job_restarts_on_the_same_rendezvous_port) {
  ScratchDir dir("restart_train");
  const std::string master = "127.0.0.1:" + std::to_string(free_port());
  BackgroundCommand job(pw::test::pipewright_binary() + " launch --grace 5 --max-restarts 1 --nproc-per-node 2 --master " +
                            master + " -- --model seed-cnn --dataset synthetic --synthetic-size 512 --batch-size 32 "
                            "--threads 1 --steps 60 --log-every 1 --stages 2 --micro-batches 2 --summary " +
                            dir.file("run.json"),
                        dir.file("job.log"));
  BOOST_REQUIRE_MESSAGE(job.wait_for_output("[rank 0] step ", 120s, 3), job.output());
  pid_t victim = -1;
  for (pid_t pid : job.children())
    if (pw::test::rank_of(pid) == 1) victim = pid;
  BOOST_REQUIRE_MESSAGE(victim > 0, "rank 1 not found\n" << job.output());
  kill(victim, SIGKILL);
  const auto status = job.wait(300s);
  const auto out = job.output();
  BOOST_REQUIRE_MESSAGE(status.has_value(), "the job still runs after 300 s:\n" << out);
  BOOST_TEST(*status == 0, out);
  BOOST_TEST(out.find("attempt 0: rank 1 (pid " + std::to_string(victim) +
                      ") was killed by signal 9 (SIGKILL); restart 1 of 1") != std::string::npos,
             out);
  BOOST_TEST(out.find("attempt 1: ranks 0-1 started; rendezvous " + master) != std::string::npos, out);
  BOOST_TEST(out.find("all 2 ranks finished (after 1 restart)") != std::string::npos, out);
  BOOST_TEST(read_json(dir.file("run.json"))["world_size"] == 2);
}

// `launch --ps`: the parameter servers hold the embedding tables and keep running while the ranks
// restart (same processes, same addresses); the restarted ranks restore the servers' tables from
// their newest checkpoint (the one of step 0 at least, see below).
BOOST_AUTO_TEST_CASE(parameter_servers_keep_running_across_restarts) {
  ScratchDir dir("restart_ps");
  BackgroundCommand job(pw::test::pipewright_binary() + " launch --ps 2 --max-restarts 1 --grace 5 --nproc-per-node 2 -- "
                            "--model dlrm --dataset synthetic-clicks --synthetic-size 20000 --threads 1 --replicas 2 "
                            "--ps-mode async --optimizer sgd --momentum 0 --lr 0.1 --steps 1200 --log-every 1 "
                            "--checkpoint-dir " + dir.file("ckpt") + " --checkpoint-every 200",
                        dir.file("job.log"));
  BOOST_REQUIRE_MESSAGE(job.wait_for_output("[rank 0] step ", 120s, 3), job.output());
  std::vector<pid_t> servers;
  pid_t victim = -1;
  for (pid_t pid : job.children()) {
    const int rank = pw::test::rank_of(pid);
    if (rank < 0) servers.push_back(pid);
    if (rank == 1) victim = pid;
  }
  BOOST_REQUIRE_MESSAGE(servers.size() == 2 && victim > 0, job.output());
  kill(victim, SIGKILL);
  BOOST_REQUIRE_MESSAGE(job.wait_for_output("attempt 1: ranks 0-1 started", 60s), job.output());
  const auto children = job.children();
  for (pid_t server : servers) {
    BOOST_TEST(pw::test::process_exists(server), "parameter server pid " << server << " is gone");
    BOOST_TEST((std::find(children.begin(), children.end(), server) != children.end()));
  }
  const auto status = job.wait(300s);
  const auto out = job.output();
  BOOST_REQUIRE_MESSAGE(status.has_value(), "the job still runs after 300 s:\n" << out);
  BOOST_TEST(*status == 0, out);
  BOOST_TEST(out.find("all 2 ranks finished (after 1 restart)") != std::string::npos, out);
  BOOST_TEST(out.find("starts again") == std::string::npos, out);
  for (const std::string line : {"[ps 0] parameter server shard 0 of 2 listening", "[ps 1] parameter server shard 1 of 2 listening"}) {
    std::size_t starts = 0;
    for (auto at = out.find(line); at != std::string::npos; at = out.find(line, at + 1)) ++starts;
    BOOST_TEST(starts == 1u, line << "\n" << out);
  }
}

// A parameter server that dies fails the attempt; it alone starts again, on its port, from its
// snapshot under --ps-dir, before the ranks restart (which then restore every server's tables from
// their newest checkpoint).
BOOST_AUTO_TEST_CASE(a_failed_parameter_server_starts_again_on_its_port) {
  ScratchDir dir("restart_psfail");
  BackgroundCommand job(pw::test::pipewright_binary() + " launch --ps 2 --ps-dir " + dir.file("ps") +
                            " --max-restarts 1 --grace 5 --nproc-per-node 2 -- --model dlrm --dataset synthetic-clicks "
                            "--synthetic-size 20000 --threads 1 --replicas 2 --optimizer sgd --momentum 0 --lr 0.1 "
                            "--ps-mode async --steps 1200 --log-every 1 --checkpoint-dir " + dir.file("ckpt") +
                            " --checkpoint-every 200",
                        dir.file("job.log"));
  BOOST_REQUIRE_MESSAGE(job.wait_for_output("[rank 0] step ", 120s, 3), job.output());
  std::vector<pid_t> servers;
  for (pid_t pid : job.children())
    if (pw::test::rank_of(pid) < 0) servers.push_back(pid);
  BOOST_REQUIRE_MESSAGE(servers.size() == 2, job.output());
  const std::regex listening(R"(\[ps 0\] parameter server shard 0 of 2 listening on (127\.0\.0\.1:\d+))");
  std::smatch first;
  const std::string before = job.output();
  BOOST_REQUIRE_MESSAGE(std::regex_search(before, first, listening), before);
  kill(servers[0], SIGKILL);
  BOOST_REQUIRE_MESSAGE(job.wait_for_output("attempt 1: ranks 0-1 started", 60s), job.output());
  const auto out = job.output();
  BOOST_TEST(out.find("attempt 0: parameter server 0 (pid " + std::to_string(servers[0]) +
                      ") was killed by signal 9 (SIGKILL) while the ranks ran; restart 1 of 1") != std::string::npos,
             out);
  BOOST_TEST(out.find("parameter server 0 starts again on " + first[1].str() + " (from its snapshot in " +
                      dir.file("ps") + ")") != std::string::npos,
             out);
  BOOST_TEST(out.find("parameter server 1 starts again") == std::string::npos, out);
  // The new server 0 listens on the old address, before the ranks start; server 1 is the same process.
  const auto restarted_at = out.find("parameter server 0 starts again");
  const auto relisten = out.find("[ps 0] parameter server shard 0 of 2 listening on " + first[1].str(), restarted_at);
  BOOST_TEST((relisten != std::string::npos && relisten < out.find("attempt 1: ranks 0-1 started")), out);
  BOOST_TEST(pw::test::process_exists(servers[1]));
  BOOST_TEST(job.wait(300s).has_value(), "the job still runs after 300 s:\n" << job.output());
}

// Without restarts a killed server ends the job with 128 + the signal (not 1, which means out of
// memory), in a line naming the shard and its pid.
BOOST_AUTO_TEST_CASE(a_killed_parameter_server_without_restarts_ends_the_job_with_128_plus_the_signal) {
  ScratchDir dir("psfail_once");
  BackgroundCommand job(pw::test::pipewright_binary() + " launch --ps 1 --grace 1 --nproc-per-node 2 -- --model dlrm "
                            "--dataset synthetic-clicks --synthetic-size 20000 --threads 1 --replicas 2 --ps-mode async "
                            "--steps 1200 --log-every 1",
                        dir.file("job.log"));
  BOOST_REQUIRE_MESSAGE(job.wait_for_output("[rank 0] step ", 120s, 3), job.output());
  pid_t server = -1;
  for (pid_t pid : job.children())
    if (pw::test::rank_of(pid) < 0) server = pid;
  BOOST_REQUIRE_MESSAGE(server > 0, job.output());
  kill(server, SIGKILL);
  const auto status = job.wait(120s);
  const auto out = job.output();
  BOOST_REQUIRE_MESSAGE(status.has_value(), "the job still runs 120 s after its server was killed:\n" << out);
  BOOST_TEST(*status == 128 + SIGKILL, out);
  BOOST_TEST(out.find("job failed: a parameter server (shard 0, pid " + std::to_string(server) +
                      ") was killed by signal 9 (SIGKILL)") != std::string::npos,
             out);
}

// A checkpoint that cannot be written for a full disk (PW_INJECT_FAULT=disk-full, the error a real
// ENOSPC gives) on rank 2 of 4: rank 0 stops the job for it with status 2 (the other ranks stop
// because it did, after hearing why), the launcher names rank 0's status, and bad input is not
// restarted.
BOOST_AUTO_TEST_CASE(a_full_disk_fails_the_job_once_with_status_2_naming_the_rank) {
  ScratchDir dir("restart_diskfull");
  const std::string ckpt = dir.file("ckpt");
  const auto r = run_command("PW_INJECT_FAULT=disk-full@2:2 " + pw::test::pipewright_binary() +
                             " launch --grace 5 --max-restarts 2 --nproc-per-node 4 -- --model seed-cnn --dataset "
                             "synthetic --synthetic-size 64 --batch-size 8 --threads 1 --stages 4 --micro-batches 4 "
                             "--steps 4 --checkpoint-dir " + ckpt + " --checkpoint-every 2");
  BOOST_TEST(r.status == 2, r.output);
  BOOST_TEST(r.output.find("restart 1 of") == std::string::npos, r.output);
  const std::string error = "[rank 0] pipewright: error: checkpoint " + ckpt + "/step-0000002 was not written: rank 2: "
                            "cannot write '" + ckpt + "/step-0000002/";
  const auto at = r.output.find(error);
  BOOST_TEST_REQUIRE(at != std::string::npos, r.output);
  const std::string line = r.output.substr(at, r.output.find('\n', at) - at);
  BOOST_TEST(line.find("': No space left on device") != std::string::npos, line);
  BOOST_TEST(r.output.find("job failed: attempt 0: rank 0 (pid ") != std::string::npos, r.output);
  BOOST_TEST(r.output.find(") exited with status 2\n") != std::string::npos, r.output);
  // The others stopped because rank 0 did, and said so: none exited first as if a rank were lost.
  BOOST_TEST(r.output.find(" was lost") == std::string::npos, r.output);
  BOOST_TEST(!std::filesystem::exists(ckpt + "/step-0000002"));
}

// The parameter servers keep every step's updates across a restart. So a job with servers that a
// launcher may restart writes a checkpoint of step 0 before its first step (every rank waits for
// it), and a restart before the first regular checkpoint resumes from it, the servers' tables
// restored to their empty start: the result is bitwise the undisturbed run's, dense weights, losses
// and the servers' final tables alike (sync mode, 2 replicas, 2 servers).
BOOST_AUTO_TEST_CASE(a_restart_before_the_first_checkpoint_resumes_the_servers_from_step_0) {
  ScratchDir dir("restart_ps_start");
  const std::string job = " launch --ps 2 --max-restarts 2 --grace 2 --nproc-per-node 2 -- --model dlrm --dataset "
                          "synthetic-clicks --synthetic-size 4000 --batch-size 64 --threads 1 --replicas 2 "
                          "--eval-batches 4 --steps 12 --checkpoint-every 100 ";
  auto r = run_pipewright(job + "--checkpoint-dir " + dir.file("full_ckpt") + " --summary " + dir.file("full.json") +
                          " --save " + dir.file("full.safetensors"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  // Rank 1 kills itself as it is about to make step 5 of the first attempt.
  r = run_command("PW_INJECT_FAULT=sigkill@5:1/0 " + pw::test::pipewright_binary() + job + "--checkpoint-dir " +
                  dir.file("ckpt") + " --summary " + dir.file("restarted.json") + " --save " +
                  dir.file("restarted.safetensors"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  BOOST_TEST(r.output.find("all 2 ranks finished (after 1 restart)") != std::string::npos, r.output);
  BOOST_TEST(r.output.find("resumed from " + dir.file("ckpt") + "/step-0000000 (step 0 of 12)") != std::string::npos,
             r.output);
  pw::test::check_same(dir, "full", "restarted");
  const auto s = read_json(dir.file("restarted.json"));
  BOOST_TEST(s["restarts"] == 1);
  BOOST_TEST(s["resumed_from_step"] == 0);
  // The servers' tables after the last step: the same bytes.
  const auto servers_of = [&](const std::string& ckpt) {
    return read_json(dir.file(ckpt + "/step-0000012/manifest.json"))["parameter_servers"]["files"];
  };
  BOOST_TEST(servers_of("full_ckpt").size() == 8u);   // 3 tables and a manifest on each of 2 shards
  BOOST_TEST(servers_of("full_ckpt") == servers_of("ckpt"));
}

// Without --checkpoint-dir (or --resume) such a job is refused at its start, in one line naming the
// flags, with status 2, and the launcher does not restart it (bad input would be refused alike).
BOOST_AUTO_TEST_CASE(a_job_with_servers_and_restarts_but_no_checkpoint_dir_is_refused_once) {
  const auto r = run_pipewright("launch --ps 2 --max-restarts 3 --grace 2 --nproc-per-node 2 -- --model dlrm --dataset "
                                "synthetic-clicks --synthetic-size 4000 --batch-size 64 --threads 1 --replicas 2 "
                                "--steps 4");
  BOOST_TEST(r.status == 2, r.output);
  BOOST_TEST(r.output.find("[rank 0] pipewright: error: --checkpoint-dir: a job with parameter servers that its "
                           "launcher may restart (max restarts 3) needs checkpoints: give --checkpoint-dir and "
                           "--checkpoint-every") != std::string::npos,
             r.output);
  BOOST_TEST(r.output.find("restart 1 of 3") == std::string::npos, r.output);
  BOOST_TEST(r.output.find("job failed: attempt 0: rank") != std::string::npos, r.output);
  // Servers in the job's own process that keep nothing start empty again with it: no checkpoint needed.
  const auto embedded = run_pipewright("launch --max-restarts 1 --nproc-per-node 1 -- --model dlrm --dataset "
                                       "synthetic-clicks --synthetic-size 4000 --batch-size 64 --threads 1 --ps 2 "
                                       "--steps 2 --eval-batches 1");
  BOOST_TEST(embedded.status == 0, embedded.output);
  // A job that resumes a given checkpoint goes back to it on a restart, servers included: accepted.
  ScratchDir dir("restart_ps_resume");
  const std::string job = " --nproc-per-node 2 -- --model dlrm --dataset synthetic-clicks --synthetic-size 4000 "
                          "--batch-size 64 --threads 1 --replicas 2 --eval-batches 1 ";
  const auto first = run_pipewright("launch --ps 2" + job + "--steps 2 --checkpoint-dir " + dir.file("ckpt"));
  BOOST_REQUIRE_MESSAGE(first.status == 0, first.output);
  const auto resumed = run_pipewright("launch --ps 2 --max-restarts 1" + job + "--steps 4 --resume " + dir.file("ckpt"));
  BOOST_TEST(resumed.status == 0, resumed.output);
}

// Two launchers on loopback as two nodes of one rank each: a failure on either node restarts both,
// for the same attempt, with the same causes.
BOOST_AUTO_TEST_CASE(two_nodes_restart_together) {
  ScratchDir dir("restart_nodes");
  KillLeftovers cleanup{dir};
  // Attempt 0: node 1's rank exits 7 while node 0's sleeps; attempt 1: node 0's is killed while
  // node 1's sleeps; attempt 2 succeeds.
  const std::string script = rank_script(dir, "0:0 sleep\n0:1 exit 7\n1:0 kill9\n1:1 sleep\n");
  const std::string launch = "env PW_JOB_TOKEN=0123456789abcdef " + pw::test::pipewright_binary() +
                             " launch --grace 1 --nnodes 2 --nproc-per-node 1 --max-restarts 2 --node-timeout 60 "
                             "--master 127.0.0.1:" + std::to_string(free_port());
  BackgroundCommand node1(launch + " --node-rank 1 -- " + script, dir.file("node1.log"));
  BackgroundCommand node0(launch + " --node-rank 0 -- " + script, dir.file("node0.log"));
  const auto s0 = node0.wait(120s), s1 = node1.wait(30s);
  const std::string both = "node 0:\n" + node0.output() + "\nnode 1:\n" + node1.output();
  BOOST_REQUIRE_MESSAGE(s0 && *s0 == 0, both);
  BOOST_REQUIRE_MESSAGE(s1 && *s1 == 0, both);
  BOOST_TEST(lines_of(dir.file("counts.0")) == "0\n1\n2\n", both);
  BOOST_TEST(lines_of(dir.file("counts.1")) == "0\n1\n2\n", both);
  BOOST_TEST(!std::filesystem::exists(dir.file("overlap")), read_file(dir.file("overlap")));
  const std::string first = "attempt 0: rank 1 (pid " + pid_of(dir, 0, 1) + ") on node 1 exited with status 7";
  const std::string second = "attempt 1: rank 0 (pid " + pid_of(dir, 1, 0) + ") on node 0 was killed by signal 9 (SIGKILL)";
  for (int rank = 0; rank < 2; ++rank) {
    BOOST_TEST(causes_seen(dir, 1, rank) == std::vector<std::string>{first}, both);
    BOOST_TEST(causes_seen(dir, 2, rank) == (std::vector<std::string>{first, second}), both);
  }
  BOOST_TEST(node0.output().find("all 1 ranks finished (after 2 restarts)") != std::string::npos, both);
  BOOST_TEST(node1.output().find("all 1 ranks finished (after 2 restarts)") != std::string::npos, both);
}

BOOST_AUTO_TEST_CASE(a_lost_launcher_or_different_max_restarts_end_every_node_with_one_line) {
  ScratchDir dir("restart_lost");
  KillLeftovers cleanup{dir};
  const std::string script = rank_script(dir, "0:0 sleep\n0:1 sleep\n");
  const std::string launch = "env PW_JOB_TOKEN=0123456789abcdef " + pw::test::pipewright_binary() +
                             " launch --grace 1 --nnodes 2 --nproc-per-node 1 --node-timeout 60 --master 127.0.0.1:";
  {
    const std::string port = std::to_string(free_port());
    BackgroundCommand node1(launch + port + " --max-restarts 2 --node-rank 1 -- " + script, dir.file("lost1.log"));
    BackgroundCommand node0(launch + port + " --max-restarts 2 --node-rank 0 -- " + script, dir.file("lost0.log"));
    BOOST_REQUIRE_MESSAGE(node0.wait_for_output("rank 0 attempt 0: sleep", 60s), node0.output());
    BOOST_REQUIRE_MESSAGE(node1.wait_for_output("rank 1 attempt 0: sleep", 60s), node1.output());
    kill(node1.pid(), SIGKILL);
    const auto s0 = node0.wait(60s);
    BOOST_REQUIRE_MESSAGE(s0.has_value(), "node 0 still runs 60 s after node 1's launcher was killed\n" << node0.output());
    BOOST_TEST(*s0 == 1, node0.output());
    BOOST_TEST(node0.output().find("job failed: node 1's launcher was lost") != std::string::npos, node0.output());
    BOOST_TEST(lines_of(dir.file("counts.0")) == "0\n", node0.output());
  }
  {
    const std::string port = std::to_string(free_port());
    BackgroundCommand node1(launch + port + " --max-restarts 1 --node-rank 1 -- " + script, dir.file("diff1.log"));
    BackgroundCommand node0(launch + port + " --max-restarts 2 --node-rank 0 -- " + script, dir.file("diff0.log"));
    const auto s1 = node1.wait(60s), s0 = node0.wait(30s);
    const std::string both = "node 0:\n" + node0.output() + "\nnode 1:\n" + node1.output();
    BOOST_REQUIRE_MESSAGE(s0 && s1, both);
    BOOST_TEST(*s1 == 2, both);
    BOOST_TEST(node1.output().find("--max-restarts 1 on node 1 but 2 on node 0; give every node's launcher the same "
                                   "--max-restarts") != std::string::npos,
               both);
    BOOST_TEST(*s0 == 1, both);
    BOOST_TEST(node0.output().find("job failed: node 1's launcher failed: --max-restarts 1 on node 1 but 2 on node 0") !=
                   std::string::npos,
               both);
    BOOST_TEST(node0.output().find("[rank 0]") == std::string::npos, both);   // no rank started
  }
}

BOOST_AUTO_TEST_SUITE_END()
