#pragma once
// What one attempt of a node's ranks came to (Outcome) and what the job does next (Decision). Pure
// functions: a single-node launcher decides for itself; with several nodes node 0's launcher
// combines every node's outcome and decides for all of them (node_agent.h).
#include <string>
#include <vector>

namespace pw::launcher {

// `pipewright train` exits 5 when it stopped because another rank failed: an echo, not a cause.
inline constexpr int kStoppedByOtherRank = 5;
bool is_echo(int wait_status);
// It exits 6 when the job ran but did not train (diverged, no rollback left, every step skipped):
// a restart would resume the same checkpoint and, the job being deterministic, fail alike.
inline constexpr int kDidNotTrain = 6;
// It exits 2 for bad input (a flag, a file, a checkpoint, a job that cannot resume): the same
// command would be refused alike, so that is not restarted either.
inline constexpr int kBadInput = 2;

struct Outcome {
  enum class Kind {
    kOk,      // every rank ended well (or was stopped because another node failed)
    kCause,   // a rank or a parameter server failed by itself
    kEcho,    // ranks failed only because another rank did (exit 5), and no cause was seen
    kAbort,   // the launcher got a signal, or the launchers lost each other: no restart
  };
  Kind kind = Kind::kOk;
  std::string cause;       // one line: "attempt N: rank R (pid P) exited with status 3"
  std::string summary;     // what `launch` without restarts ends with: "rank R exited with status 3"
  int exit_code = 0;
  int signal = 0;          // the SIGINT/SIGTERM this launcher got (it then ends with 128 + it, saying no more)
};

struct Decision {
  enum class Kind {
    kOk,          // the job is done
    kRestart,     // start every rank again
    kFail,        // the job failed without a restart (an abort)
    kExhausted,   // the job failed: no restart was left
  };
  Kind kind = Kind::kOk;
  std::string cause, summary;
  int exit_code = 0;   // non-zero unless kOk
};

// After attempt `attempt` (0 first) ended with `outcome`, at most `max_restarts` restarts in all.
// A cause that exited kDidNotTrain or kBadInput fails the job without a restart.
Decision decide(const Outcome& outcome, int attempt, int max_restarts);

// Every node's outcome of one attempt → the one the job goes by: an abort if any, else a cause,
// else an echo, else ok. Among outcomes of one kind the node that announced its failure first
// (`announcer`; -1 or out of range: none) wins, else the lowest node.
Outcome combine_node_outcomes(const std::vector<Outcome>& per_node, int announcer);

}  // namespace pw::launcher
