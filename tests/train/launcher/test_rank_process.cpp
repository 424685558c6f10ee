// A rank's process: its output reaches ours line by line with a prefix, its environment is ours
// with the launcher's variables over it, reaping it also ends what it left running, and a program
// that cannot be started is a one-line InputError before anything starts.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include <boost/test/unit_test.hpp>

#include "core/error.h"
#include "tests/tools/cli_runner.h"
#include "tests/tools/job_outputs.h"
#include "train/launcher/output_forwarder.h"
#include "train/launcher/rank_process.h"

using namespace pw::launcher;
using Clock = std::chrono::steady_clock;

namespace {

using pw::test::read_file;

ChildCommand shell(const std::string& script) { return ChildCommand{"/bin/sh", {"-c", script}, {}}; }

// Reaps `p`, waiting at most `limit`; false when it still runs then.
bool reap_within(RankProcess& p, std::chrono::seconds limit) {
  const auto by = Clock::now() + limit;
  while (!p.reap()) {
    if (Clock::now() > by) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

bool file_has_content(const std::string& path) { return !read_file(path).empty(); }

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

BOOST_AUTO_TEST_SUITE(rank_process)

BOOST_AUTO_TEST_CASE(output_is_forwarded_line_by_line_with_the_prefix) {
  pw::test::ScratchDir dir("forwarder");
  int fds[2];
  BOOST_REQUIRE(pipe(fds) == 0);
  std::FILE* out = std::fopen(dir.file("out").c_str(), "w");
  BOOST_REQUIRE(out != nullptr);
  std::mutex mutex;
  {
    OutputForwarder forwarder(fds[0], out, "[rank 3] ", mutex);
    const std::string text = "first\nsecond\r\n\nthird without newline";
    BOOST_REQUIRE(write(fds[1], text.data(), text.size()) == static_cast<ssize_t>(text.size()));
    close(fds[1]);
  }   // waits for the pipe to close
  std::fclose(out);
  BOOST_TEST(read_file(dir.file("out")) == "[rank 3] first\n[rank 3] second\n[rank 3] third without newline\n");
}

BOOST_AUTO_TEST_CASE(statuses_are_described_and_mapped_to_exit_codes) {
  std::mutex mutex;
  RankProcess exits(0, shell("exit 3"), "[rank 0] ", mutex);
  RankProcess killed(1, shell("kill -9 $$"), "[rank 1] ", mutex);
  BOOST_REQUIRE(reap_within(exits, std::chrono::seconds(60)));
  BOOST_REQUIRE(reap_within(killed, std::chrono::seconds(60)));
  BOOST_TEST(describe_status(*exits.status()) == "exited with status 3");
  BOOST_TEST(exit_code_of(*exits.status()) == 3);
  BOOST_TEST(describe_status(*killed.status()) == "was killed by signal 9 (SIGKILL)");
  BOOST_TEST(exit_code_of(*killed.status()) == 137);
  BOOST_TEST((exits.ended_by() == EndedBy::kItself));
}

BOOST_AUTO_TEST_CASE(the_child_sees_our_environment_with_the_given_variables_over_it) {
  pw::test::ScratchDir dir("rank_env");
  setenv("PW_TEST_INHERITED", "kept", 1);
  setenv("PW_TEST_REPLACED", "old", 1);
  ChildCommand c = shell("echo \"$PW_TEST_INHERITED $PW_TEST_REPLACED $PW_TEST_ADDED\" > " + dir.file("env"));
  c.env = {{"PW_TEST_REPLACED", "new"}, {"PW_TEST_ADDED", "added"}};
  std::mutex mutex;
  RankProcess p(0, c, "", mutex);
  BOOST_REQUIRE(reap_within(p, std::chrono::seconds(60)));
  BOOST_TEST(*p.status() == 0);
  BOOST_TEST(read_file(dir.file("env")) == "kept new added\n");
}

BOOST_AUTO_TEST_CASE(reaping_a_rank_also_ends_what_it_left_running) {
  prctl(PR_SET_CHILD_SUBREAPER, 1);   // as the supervisor is
  pw::test::ScratchDir dir("rank_group");
  std::mutex mutex;
  RankProcess p(0, shell("sleep 60 & echo $! > " + dir.file("left") + "; exit 0"), "", mutex);
  BOOST_REQUIRE(reap_within(p, std::chrono::seconds(60)));
  BOOST_REQUIRE(file_has_content(dir.file("left")));
  const pid_t left = std::stoi(read_file(dir.file("left")));
  BOOST_TEST(kill(left, 0) != 0, "pid " << left << " the rank started is still there");
}

BOOST_AUTO_TEST_CASE(terminate_stops_the_group_and_remembers_who_stopped_it) {
  pw::test::ScratchDir dir("rank_term");
  std::mutex mutex;
  const auto started = Clock::now();
  RankProcess p(0, shell("touch " + dir.file("up") + "; exec sleep 60"), "", mutex);
  for (const auto by = Clock::now() + std::chrono::seconds(30); !std::filesystem::exists(dir.file("up")) && Clock::now() < by;)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  p.terminate();
  BOOST_REQUIRE(reap_within(p, std::chrono::seconds(50)));
  BOOST_TEST((p.ended_by() == EndedBy::kLauncher));
  BOOST_TEST(exit_code_of(*p.status()) == 128 + SIGTERM);
  BOOST_TEST(seconds_since(started) < 59.0);   // not the sleep's own end
}

BOOST_AUTO_TEST_CASE(a_running_rank_is_killed_when_it_goes_out_of_scope) {
  std::mutex mutex;
  pid_t pid = -1;
  {
    RankProcess p(0, shell("exec sleep 60"), "", mutex);
    pid = p.pid();
  }
  BOOST_TEST(kill(pid, 0) != 0, "pid " << pid << " is still there");
}

BOOST_AUTO_TEST_CASE(a_program_that_cannot_start_is_a_one_line_input_error) {
  for (const std::string program : {"/nonexistent/pw_program", "pw_no_such_program_on_path"}) {
    try {
      check_program(program);
      BOOST_FAIL("no error for " << program);
    } catch (const pw::InputError& e) {
      const std::string what = e.what();
      BOOST_TEST(what.find("'" + program + "'") != std::string::npos, what);
      BOOST_TEST(what.find('\n') == std::string::npos, what);
    }
  }
  BOOST_CHECK_NO_THROW(check_program(""));   // this executable
  BOOST_CHECK_NO_THROW(check_program("/bin/sh"));
  BOOST_CHECK_NO_THROW(check_program("sh"));
}

BOOST_AUTO_TEST_SUITE_END()
