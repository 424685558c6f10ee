#include "train/launcher/restart_policy.h"

#include <sys/wait.h>

namespace pw::launcher {

bool is_echo(int wait_status) { return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == kStoppedByOtherRank; }

Decision decide(const Outcome& outcome, int attempt, int max_restarts) {
  Decision d{Decision::Kind::kOk, outcome.cause, outcome.summary, outcome.exit_code};
  if (outcome.kind == Outcome::Kind::kOk) return d;
  if (outcome.kind == Outcome::Kind::kAbort) d.kind = Decision::Kind::kFail;
  else if (outcome.kind == Outcome::Kind::kCause && (outcome.exit_code == kDidNotTrain || outcome.exit_code == kBadInput))
    d.kind = Decision::Kind::kFail;
  else if (attempt < max_restarts) d.kind = Decision::Kind::kRestart;
  else d.kind = Decision::Kind::kExhausted;
  if (d.exit_code == 0) d.exit_code = 1;
  return d;
}

Outcome combine_node_outcomes(const std::vector<Outcome>& per_node, int announcer) {
  const auto find = [&](Outcome::Kind kind) -> const Outcome* {
    if (announcer >= 0 && announcer < static_cast<int>(per_node.size()) &&
        per_node[static_cast<std::size_t>(announcer)].kind == kind)
      return &per_node[static_cast<std::size_t>(announcer)];
    for (const auto& o : per_node)
      if (o.kind == kind) return &o;
    return nullptr;
  };
  for (const auto kind : {Outcome::Kind::kAbort, Outcome::Kind::kCause, Outcome::Kind::kEcho})
    if (const Outcome* pick = find(kind)) return *pick;
  return Outcome{};
}

}  // namespace pw::launcher
