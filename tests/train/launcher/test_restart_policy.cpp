// The restart decision table and how node 0's launcher combines every node's outcome: pure.
#include <sys/wait.h>

#include <boost/test/unit_test.hpp>

#include "train/launcher/restart_policy.h"

using namespace pw::launcher;
using Kind = Outcome::Kind;
using Next = Decision::Kind;

namespace {

Outcome outcome(Kind kind, const std::string& cause = "attempt 0: rank 1 (pid 7) exited with status 3",
                int exit_code = 3) {
  return Outcome{kind, cause, "rank 1 exited with status 3", exit_code};
}

int exited_with(int code) { return code << 8; }   // a wait status, as waitpid reports it
int killed_by(int sig) { return sig; }

}  // namespace

BOOST_AUTO_TEST_SUITE(restart_policy)

BOOST_AUTO_TEST_CASE(an_ok_attempt_ends_the_job_well_whatever_restarts_are_left) {
  for (const int max_restarts : {0, 1, 5})
    for (const int attempt : {0, 1, 5}) {
      const Decision d = decide(Outcome{}, attempt, max_restarts);
      BOOST_TEST((d.kind == Next::kOk));
      BOOST_TEST(d.exit_code == 0);
      BOOST_TEST(d.cause.empty());
    }
}

BOOST_AUTO_TEST_CASE(a_failure_restarts_while_restarts_are_left_then_is_exhausted) {
  struct Row {
    int attempt, max_restarts;
    Next expected;
  };
  const Row table[] = {{0, 0, Next::kExhausted}, {0, 1, Next::kRestart}, {1, 1, Next::kExhausted},
                       {0, 3, Next::kRestart},   {2, 3, Next::kRestart}, {3, 3, Next::kExhausted},
                       {7, 3, Next::kExhausted}};
  for (const Kind kind : {Kind::kCause, Kind::kEcho})
    for (const Row& row : table) {
      const Decision d = decide(outcome(kind), row.attempt, row.max_restarts);
      BOOST_TEST((d.kind == row.expected), "attempt " << row.attempt << " of max " << row.max_restarts);
      BOOST_TEST(d.exit_code == 3);
      BOOST_TEST(d.cause == "attempt 0: rank 1 (pid 7) exited with status 3");
      BOOST_TEST(d.summary == "rank 1 exited with status 3");
    }
}

BOOST_AUTO_TEST_CASE(an_abort_fails_at_once_even_with_restarts_left) {
  for (const int attempt : {0, 2}) {
    const Decision d = decide(outcome(Kind::kAbort, "attempt 0: the launcher got SIGTERM", 143), attempt, 5);
    BOOST_TEST((d.kind == Next::kFail));
    BOOST_TEST(d.exit_code == 143);
    BOOST_TEST(d.cause == "attempt 0: the launcher got SIGTERM");
  }
}

BOOST_AUTO_TEST_CASE(a_job_that_did_not_train_fails_at_once_even_with_restarts_left) {
  // Status 6: the job diverged or skipped every step; a restart would resume the same checkpoint.
  const std::string cause = "attempt 0: rank 0 (pid 7) exited with status 6";
  const Decision d = decide(outcome(Kind::kCause, cause, kDidNotTrain), 0, 5);
  BOOST_TEST((d.kind == Next::kFail));
  BOOST_TEST(d.exit_code == kDidNotTrain);
  BOOST_TEST(d.cause == cause);
  // Any other status of a cause restarts as before.
  BOOST_TEST((decide(outcome(Kind::kCause, cause, 3), 0, 5).kind == Next::kRestart));
}

BOOST_AUTO_TEST_CASE(bad_input_fails_at_once_even_with_restarts_left) {
  // Status 2: the same command would be refused alike.
  const std::string cause = "attempt 1: rank 0 (pid 7) exited with status 2";
  const Decision d = decide(outcome(Kind::kCause, cause, kBadInput), 1, 5);
  BOOST_TEST((d.kind == Next::kFail));
  BOOST_TEST(d.exit_code == kBadInput);
  BOOST_TEST(d.cause == cause);
}

BOOST_AUTO_TEST_CASE(a_failure_never_ends_with_status_zero) {
  BOOST_TEST(decide(outcome(Kind::kCause, "x", 0), 0, 0).exit_code == 1);
  BOOST_TEST(decide(outcome(Kind::kAbort, "x", 0), 0, 3).exit_code == 1);
  BOOST_TEST(decide(outcome(Kind::kEcho, "x", 0), 0, 3).exit_code == 1);
}

BOOST_AUTO_TEST_CASE(an_echo_is_a_rank_stopped_because_another_failed) {
  BOOST_TEST(is_echo(exited_with(kStoppedByOtherRank)));
  BOOST_TEST(!is_echo(exited_with(3)));
  BOOST_TEST(!is_echo(exited_with(0)));
  BOOST_TEST(!is_echo(killed_by(5)));   // SIGTRAP is no exit status 5
}

BOOST_AUTO_TEST_CASE(node_outcomes_combine_abort_before_cause_before_echo) {
  const Outcome ok{}, echo = outcome(Kind::kEcho, "echo"), cause = outcome(Kind::kCause, "cause"),
                abort = outcome(Kind::kAbort, "abort");
  BOOST_TEST((combine_node_outcomes({}, -1).kind == Kind::kOk));
  BOOST_TEST((combine_node_outcomes({ok, ok}, -1).kind == Kind::kOk));
  BOOST_TEST(combine_node_outcomes({ok, echo}, -1).cause == "echo");
  BOOST_TEST(combine_node_outcomes({echo, cause}, -1).cause == "cause");
  BOOST_TEST(combine_node_outcomes({cause, echo, abort}, -1).cause == "abort");
  BOOST_TEST(combine_node_outcomes({abort, cause}, 1).cause == "abort");   // an announced cause loses to an abort
}

BOOST_AUTO_TEST_CASE(among_equals_the_node_that_announced_first_wins_else_the_lowest) {
  const Outcome a = outcome(Kind::kCause, "node 0"), b = outcome(Kind::kCause, "node 1"),
                c = outcome(Kind::kCause, "node 2");
  BOOST_TEST(combine_node_outcomes({a, b, c}, -1).cause == "node 0");
  BOOST_TEST(combine_node_outcomes({a, b, c}, 2).cause == "node 2");
  BOOST_TEST(combine_node_outcomes({a, b, c}, 7).cause == "node 0");   // out of range: no announcer
  // The announcer's outcome only counts when it is of the kind being looked for.
  const Outcome echo = outcome(Kind::kEcho, "echo on node 1");
  BOOST_TEST(combine_node_outcomes({a, echo}, 1).cause == "node 0");
}

BOOST_AUTO_TEST_SUITE_END()
