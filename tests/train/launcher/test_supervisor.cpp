// The supervisor runs small shell programs as ranks: all succeed -> 0; one fails -> the others are
// stopped within the grace and the result names the rank; restarts run every rank again with the
// attempt in PW_RESTART_COUNT; a stop request stops every rank; parameter servers get their JSON
// config (pipewright ps serve --config). Bounds and final values only: nothing here depends on
// timing, and every wait has a deadline (a rank that is not stopped sleeps 60 s, then the test fails).
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "core/error.h"
#include "rpc/launch_env.h"
#include "tests/tools/cli_runner.h"
#include "tests/tools/job_outputs.h"
#include "train/launcher/supervisor.h"

using namespace pw::launcher;
using Clock = std::chrono::steady_clock;

namespace {

using pw::test::read_file;

LaunchSpec shell_job(int ranks, const std::string& script) {
  LaunchSpec spec;
  spec.nproc_per_node = ranks;
  spec.grace_seconds = 0.5;
  spec.program = "/bin/sh";
  spec.args = {"-c", script};
  return spec;
}

// What the supervisor said, and no stop request unless the test makes one.
struct Recorder {
  std::vector<std::string> lines;
  std::function<int()> stop = [] { return 0; };
  SupervisorHooks hooks() {
    return SupervisorHooks{[this](const std::string& line) { lines.push_back(line); }, [this] { return stop(); }};
  }
  bool said(const std::string& text) const {
    for (const auto& line : lines)
      if (line.find(text) != std::string::npos) return true;
    return false;
  }
  std::string all() const {
    std::string text;
    for (const auto& line : lines) text += line + "\n";
    return text;
  }
};

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(supervisor)

BOOST_AUTO_TEST_CASE(every_rank_succeeds_with_its_rank_environment) {
  pw::test::ScratchDir dir("sup_ok");
  Recorder said;
  LaunchSpec spec = shell_job(3, "echo $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR "
                                 "$PW_RESTART_COUNT $PW_MAX_RESTARTS $PW_JOB_TOKEN > " + dir.file("rank") + "$RANK");
  spec.job_token = "tok-supervisor-0123";
  const LaunchResult r = Supervisor(spec, said.hooks()).run();
  BOOST_TEST(r.exit_code == 0, said.all());
  BOOST_TEST(r.restarts == 0);
  BOOST_TEST(r.cause.empty());
  for (int rank = 0; rank < 3; ++rank)
    BOOST_TEST(read_file(dir.file("rank" + std::to_string(rank))) ==
               std::to_string(rank) + " 3 " + std::to_string(rank) + " 3 0 127.0.0.1 0 0 tok-supervisor-0123\n");
  BOOST_TEST(said.said("all 3 ranks finished"), said.all());
}

BOOST_AUTO_TEST_CASE(one_failure_stops_the_others_within_the_grace_and_names_the_rank) {
  pw::test::ScratchDir dir("sup_fail");
  Recorder said;
  const auto started = Clock::now();
  const LaunchResult r =
      Supervisor(shell_job(2, "if [ $RANK = 1 ]; then exit 3; fi; echo $$ > " + dir.file("pid0") + "; exec sleep 60"),
                 said.hooks())
          .run();
  BOOST_TEST(r.exit_code == 3, said.all());
  BOOST_TEST(r.restarts == 0);
  BOOST_TEST(r.cause.find("attempt 0: rank 1 (pid ") == 0, r.cause);
  BOOST_TEST(r.cause.find(") exited with status 3") != std::string::npos, r.cause);
  BOOST_TEST(said.said("job failed: rank 1 exited with status 3"), said.all());
  // Rank 0 would sleep 60 s: it was stopped (grace 0.5 s, SIGTERM, SIGKILL 3 s later at most).
  BOOST_TEST(seconds_since(started) < 50.0);
  const std::string pid0 = read_file(dir.file("pid0"));
  if (!pid0.empty()) BOOST_TEST(kill(std::stoi(pid0), 0) != 0, "rank 0 (pid " << pid0 << ") is still there");
}

BOOST_AUTO_TEST_CASE(restarts_run_every_rank_again_with_the_attempt_in_its_environment) {
  pw::test::ScratchDir dir("sup_restart");
  Recorder said;
  // Rank 1 fails in attempts 0 and 1, once rank 0 wrote its line (so that the grace never cuts rank 0 short;
  // at most 60 s of waiting).
  LaunchSpec spec = shell_job(2, "printf '%s' \"$PW_RESTART_CAUSES\" > " + dir.file("causes") + "$RANK.$PW_RESTART_COUNT; "
                                 "echo $PW_RESTART_COUNT $PW_MAX_RESTARTS >> " + dir.file("rank") + "$RANK; "
                                 "if [ $RANK = 1 ] && [ $PW_RESTART_COUNT -lt 2 ]; then i=0; "
                                 "while ! grep -q \"^$PW_RESTART_COUNT 2$\" " + dir.file("rank0") + " 2>/dev/null "
                                 "&& [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; exit 3; fi");
  spec.max_restarts = 2;
  const LaunchResult r = Supervisor(spec, said.hooks()).run();
  BOOST_TEST(r.exit_code == 0, said.all());
  BOOST_TEST(r.restarts == 2);
  for (int rank = 0; rank < 2; ++rank) BOOST_TEST(read_file(dir.file("rank" + std::to_string(rank))) == "0 2\n1 2\n2 2\n");
  const auto causes = pw::rpc::parse_restart_causes(read_file(dir.file("causes0.2")));
  BOOST_REQUIRE(causes.size() == 2u);
  BOOST_TEST(causes[0].find("attempt 0: rank 1 (pid ") == 0, causes[0]);
  BOOST_TEST(causes[1].find("attempt 1: rank 1 (pid ") == 0, causes[1]);
  BOOST_TEST(said.said("; restart 2 of 2: starting ranks 0-1 again"), said.all());
  BOOST_TEST(said.said("all 2 ranks finished (after 2 restarts)"), said.all());
}

BOOST_AUTO_TEST_CASE(when_no_restart_is_left_the_last_failure_ends_the_job) {
  Recorder said;
  LaunchSpec spec = shell_job(2, "if [ $RANK = 1 ]; then exit 4; fi");
  spec.max_restarts = 1;
  const LaunchResult r = Supervisor(spec, said.hooks()).run();
  BOOST_TEST(r.exit_code == 4, said.all());
  BOOST_TEST(r.restarts == 1);
  BOOST_TEST(r.cause.find("attempt 1: rank 1 (pid ") == 0, r.cause);
  BOOST_TEST(said.said("job failed after 1 restart (/max_restarts 1): attempt 1: rank 1"), said.all());
}

BOOST_AUTO_TEST_CASE(a_stop_request_stops_every_rank) {
  pw::test::ScratchDir dir("sup_stop");
  Recorder said;
  std::atomic<bool> asked{false};
  said.stop = [&] {
    const bool up = std::filesystem::exists(dir.file("up0")) && std::filesystem::exists(dir.file("up1"));
    return up && !asked.exchange(true) ? SIGTERM : 0;
  };
  LaunchSpec spec = shell_job(2, "touch " + dir.file("up") + "$RANK; exec sleep 60");
  spec.max_restarts = 3;   // a stop is no failure to restart from
  const auto started = Clock::now();
  const LaunchResult r = Supervisor(spec, said.hooks()).run();
  BOOST_TEST(r.exit_code == 128 + SIGTERM, said.all());
  BOOST_TEST(r.restarts == 0);
  BOOST_TEST(r.cause.find("got SIGTERM") != std::string::npos, r.cause);
  BOOST_TEST(said.said("got SIGTERM; stopping every rank"), said.all());
  BOOST_TEST(seconds_since(started) < 50.0);
}

namespace {

// Shell: until the process whose pid is in `file` is stopped (state T), at most 60 s; then `then`.
std::string when_stopped(const std::string& file, const std::string& then) {
  return "i=0; while [ $i -lt 600 ]; do p=$(cat " + file + " 2>/dev/null); if [ -n \"$p\" ] && "
         "[ \"$(cut -d' ' -f3 /proc/$p/stat 2>/dev/null)\" = T ]; then " + then + "; fi; sleep 0.1; i=$((i+1)); "
         "done; exit 0";
}

}  // namespace

// Rank 1 stops (SIGSTOP: it can no longer send heartbeats), rank 0 then exits 5 as the others of a
// real job would (they stopped because rank 1 did). The job ends with status 4 (a wait ran past its
// timeout), naming rank 1 as stopped, not with rank 0's echo.
BOOST_AUTO_TEST_CASE(a_stopped_rank_is_the_cause_and_ends_the_job_with_status_4) {
  pw::test::ScratchDir dir("sup_stopped");
  Recorder said;
  const std::string pid1 = dir.file("pid1");
  LaunchSpec spec = shell_job(2, "if [ $RANK = 1 ]; then echo $$ > " + pid1 + ".tmp; mv " + pid1 + ".tmp " + pid1 +
                                     "; kill -STOP $$; exit 0; fi; " + when_stopped(pid1, "exit 5"));
  spec.grace_seconds = 30;   // a stopped rank cannot stop by itself: the launcher does not wait for it
  const LaunchResult r = Supervisor(spec, said.hooks()).run();
  const std::string pid = read_file(pid1);
  BOOST_REQUIRE(!pid.empty());
  const std::string rank1 = "rank 1 (pid " + pid.substr(0, pid.size() - 1) + ")";
  BOOST_TEST(r.exit_code == 4, said.all());
  BOOST_TEST(r.cause == "attempt 0: " + rank1 + " stopped (no heartbeat): stopped by signal 19 (SIGSTOP)", said.all());
  BOOST_TEST(said.said(rank1 + " stopped (no heartbeat): stopped by signal 19 (SIGSTOP)"), said.all());
  BOOST_TEST(said.said("rank 0 (pid "), said.all());
  BOOST_TEST(said.said("job failed: rank 1 stopped (no heartbeat)"), said.all());
  BOOST_TEST(kill(std::stoi(pid), 0) != 0, rank1 << " is still there");
}

// A rank that was stopped and continued, then failed by itself, is named for its own status.
BOOST_AUTO_TEST_CASE(a_rank_stopped_and_continued_is_named_for_its_own_status) {
  pw::test::ScratchDir dir("sup_continued");
  Recorder said;
  const std::string pid1 = dir.file("pid1");
  LaunchSpec spec = shell_job(2, "if [ $RANK = 1 ]; then echo $$ > " + pid1 + ".tmp; mv " + pid1 + ".tmp " + pid1 +
                                     "; kill -STOP $$; exit 3; fi; " + when_stopped(pid1, "kill -CONT $p; exit 0"));
  spec.grace_seconds = 30;
  const LaunchResult r = Supervisor(spec, said.hooks()).run();
  BOOST_TEST(r.exit_code == 3, said.all());
  BOOST_TEST(r.cause.find(") exited with status 3") != std::string::npos, r.cause);
  BOOST_TEST(!said.said("stopped (no heartbeat)"), said.all());
}

BOOST_AUTO_TEST_CASE(a_missing_program_or_a_bad_spec_is_a_one_line_input_error) {
  const auto refused = [](const LaunchSpec& spec, const std::string& expected) {
    try {
      Supervisor s(spec);
      BOOST_FAIL("no error; expected " << expected);
    } catch (const pw::InputError& e) {
      const std::string what = e.what();
      BOOST_TEST(what.find(expected) != std::string::npos, what);
      BOOST_TEST(what.find('\n') == std::string::npos, what);
    }
  };
  LaunchSpec spec = shell_job(1, "exit 0");
  spec.program = "/nonexistent/pw_rank_program";
  refused(spec, "'/nonexistent/pw_rank_program' is not an executable file");
  spec.program = "pw_no_such_rank_program";
  refused(spec, "'pw_no_such_rank_program' is neither an executable file nor a program on PATH");
  spec = shell_job(1, "exit 0");
  spec.nnodes = 2;
  spec.node_rank = 2;
  refused(spec, "/node_rank: 2 outside /nnodes 2; expected 0 to 1");
  spec.node_rank = 1;
  spec.master = {"127.0.0.1", 29400};
  refused(spec, "needs the same job token on every node");
  spec.job_token = "tok-0123456789abcdef";
  spec.master.port = 0;
  refused(spec, "/master: /nnodes 2 needs HOST:PORT");
  spec = shell_job(1, "exit 0");
  spec.nproc_per_node = 0;
  refused(spec, "/nproc_per_node: 0");
}

BOOST_AUTO_TEST_CASE(parameter_servers_get_their_json_config_and_the_ranks_their_addresses) {
  pw::test::ScratchDir dir("sup_ps");
  Recorder said;
  // sh -c SCRIPT --ps-servers ADDRS: the flag is $0, the addresses $1.
  LaunchSpec spec = shell_job(2, "echo \"$0 $1\" > " + dir.file("servers") + "$RANK");
  spec.servers.count = 2;
  spec.servers.workers = 2;
  spec.servers.config.mode = pw::dp::UpdateMode::Async;
  spec.servers.config.dir = dir.file("ps");
  spec.servers.program = pw::test::pipewright_binary();
  const LaunchResult r = Supervisor(spec, said.hooks()).run();
  BOOST_TEST(r.exit_code == 0, said.all());
  std::string servers = read_file(dir.file("servers0"));
  BOOST_REQUIRE(servers.rfind("--ps-servers ", 0) == 0);
  BOOST_TEST(servers == read_file(dir.file("servers1")));
  servers = servers.substr(std::string("--ps-servers ").size());
  BOOST_TEST(servers.rfind("127.0.0.1:", 0) == 0, servers);
  BOOST_TEST(servers.find(",127.0.0.1:") != std::string::npos, servers);
  BOOST_TEST(said.said("2 parameter servers (async, 2 workers) at " + servers.substr(0, servers.size() - 1)), said.all());
  // Each kept its shard where the config said (under dir, one folder per shard).
  BOOST_TEST(std::filesystem::is_directory(dir.file("ps/shard0")));
  BOOST_TEST(std::filesystem::is_directory(dir.file("ps/shard1")));
}

BOOST_AUTO_TEST_SUITE_END()
