#include "train/launcher/supervisor.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <optional>
#include <sstream>
#include <thread>

#include <thrift/TOutput.h>

#include "core/error.h"
#include "core/log.h"
#include "rpc/job_token.h"
#include "rpc/launch_env.h"
#include "train/launcher/loopback.h"
#include "train/launcher/node_agent.h"
#include "train/launcher/parameter_server_group.h"
#include "train/launcher/rank_process.h"
#include "train/launcher/stop_signals.h"
#include "train/launcher/tls_env.h"
#include "train/parameter_servers.h"

namespace pw::launcher {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
constexpr auto kPoll = milliseconds(50);
constexpr auto kTermToKill = std::chrono::seconds(3);
constexpr auto kAgentPoll = milliseconds(250);   // how often a launcher looks for another node's failure
// `pipewright train` exits 4 when a wait ran past its timeout; a rank that stopped (no heartbeat) is one.
constexpr int kWaitTimedOut = 4;

std::string count_of(int n, const std::string& what) { return std::to_string(n) + " " + what + (n == 1 ? "" : "s"); }

milliseconds millis(double seconds) { return milliseconds(static_cast<std::int64_t>(seconds * 1000)); }

// A LaunchSpec field that holds a value it cannot take, named by its path ("/nnodes").
void refuse_unless(bool ok, const char* path, const std::string& problem) {
  if (!ok) throw train::ConfigError(path, problem);
}

void check(const LaunchSpec& s) {
  const auto text = [](auto v) { std::ostringstream out; out << v; return out.str(); };
  refuse_unless(s.nproc_per_node >= 1, "/nproc_per_node", text(s.nproc_per_node) + "; expected 1 or more ranks");
  refuse_unless(s.nnodes >= 1, "/nnodes", text(s.nnodes) + "; expected 1 or more nodes");
  refuse_unless(s.node_rank >= 0 && s.node_rank < s.nnodes, "/node_rank",
                text(s.node_rank) + " outside /nnodes " + text(s.nnodes) + "; expected 0 to " + text(s.nnodes - 1));
  refuse_unless(s.max_restarts >= 0, "/max_restarts", text(s.max_restarts) + "; expected 0 or more");
  refuse_unless(s.grace_seconds >= 0, "/grace_seconds", text(s.grace_seconds) + "; expected 0 or more seconds");
  refuse_unless(s.node_timeout_seconds > 0, "/node_timeout_seconds", text(s.node_timeout_seconds) + "; expected seconds > 0");
  refuse_unless(s.nnodes == 1 || !s.job_token.empty(), "/job_token",
                "a job of " + text(s.nnodes) + " nodes needs the same job token on every node (a secret, e.g. "
                "$(openssl rand -hex 16))");
  refuse_unless(s.nnodes == 1 || s.master.port > 0, "/master",
                "/nnodes " + text(s.nnodes) + " needs HOST:PORT (node 0's address, reachable from every node)");
  refuse_unless(s.servers.count >= 0, "/servers/count", text(s.servers.count) + "; expected 0 or more servers");
  refuse_unless(s.servers.count == 0 || s.nnodes == 1, "/servers/count",
                "the launcher starts the parameter servers of a single-node job; for " + text(s.nnodes) +
                    " nodes start them on their own (pipewright ps serve) and give the ranks their addresses");
  check_program(s.program);
  if (s.servers.count > 0) check_program(s.servers.program);
}

}  // namespace

Supervisor::Supervisor(LaunchSpec spec, SupervisorHooks hooks) : spec_(std::move(spec)), hooks_(std::move(hooks)) {
  check(spec_);
  spec_.tls = checked_tls(spec_.tls);
  spec_.servers.tls = spec_.tls;
  if (spec_.job_token.empty()) spec_.job_token = rpc::make_job_token();
  if (spec_.master.port == 0) master_port_ = MasterPort::kFreshEachAttempt;
  if (!hooks_.report)
    hooks_.report = [](const std::string& line) {
      std::fprintf(stderr, "pipewright launch: %s\n", line.c_str());
      std::fflush(stderr);
    };
  if (!hooks_.take_stop_request) hooks_.take_stop_request = take_stop_signal;
}

Supervisor::~Supervisor() {
  ranks_.clear();     // each kills and waits for what still runs
  servers_.reset();
  agent_.reset();
}

void Supervisor::say(const std::string& line) {
  std::lock_guard lock(output_mutex_);
  hooks_.report(line);
}

std::string Supervisor::rank_range() const {
  return std::to_string(spec_.node_rank * spec_.nproc_per_node) + "-" +
         std::to_string((spec_.node_rank + 1) * spec_.nproc_per_node - 1);
}

LaunchResult Supervisor::run() {
  std::signal(SIGPIPE, SIG_IGN);
  // What a rank leaves behind when it ends becomes ours, so that it can be waited for (reap).
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  if (master_port_ == MasterPort::kFreshEachAttempt) spec_.master.port = free_loopback_port();
  say("node " + std::to_string(spec_.node_rank) + " of " + std::to_string(spec_.nnodes) + " starts ranks " +
      rank_range() + " of " + std::to_string(spec_.nnodes * spec_.nproc_per_node) + "; rendezvous " +
      spec_.master.str() + (spec_.max_restarts > 0 ? "; at most " + count_of(spec_.max_restarts, "restart") : ""));
  try {
    return run_attempts();
  } catch (const CoordinationError& e) {
    ranks_.clear();
    servers_.reset();
    agent_.reset();
    say(std::string("job failed: ") + e.what());
    return LaunchResult{1, 0, e.what()};
  }
}

LaunchResult Supervisor::run_attempts() {
  if (spec_.servers.count > 0) {
    servers_ = std::make_unique<ParameterServerGroup>(spec_.servers, spec_.job_token,
                                                      [this](const std::string& line) { say(line); }, output_mutex_);
    say(std::to_string(spec_.servers.count) + " parameter servers (" + std::string(enum_name(spec_.servers.config.mode)) + ", " +
        std::to_string(spec_.servers.workers) + " workers) at " + servers_->addresses());
  }
  if (spec_.nnodes > 1 && spec_.max_restarts > 0) {
    // The service's own warnings name launchers as ranks; what matters, this launcher says itself.
    if (log::level() < log::Level::Error) log::set_level(log::Level::Error);
    // Thrift reports every refused connect while node 0's launcher starts; the waits have deadlines.
    apache::thrift::GlobalOutput.setOutputFunction([](const char* message) { PW_LOG(Debug, "thrift: " << message); });
    agent_ = std::make_unique<NodeAgent>(spec_.master, spec_.job_token, spec_.node_rank, spec_.nnodes,
                                         spec_.max_restarts, millis(spec_.node_timeout_seconds),
                                         hooks_.take_stop_request,
                                         rpc::load_tls(rpc::TlsFiles{spec_.tls.cert, spec_.tls.key, spec_.tls.ca}));
    say("node " + std::to_string(spec_.node_rank) + ": every node's launcher joined at " + agent_->address().str() +
        " (restarts are decided by node 0's launcher)");
  }
  std::vector<std::string> causes;
  for (int attempt = 0;; ++attempt) {
    if (const int sig = hooks_.take_stop_request(); sig != 0) {
      say("got " + signal_name(sig) + " before attempt " + std::to_string(attempt) + " started; stopping");
      if (agent_) agent_->set_goodbye("got " + signal_name(sig));
      stop_servers();
      return LaunchResult{128 + sig, attempt, "got " + signal_name(sig)};
    }
    if (attempt > 0 && master_port_ == MasterPort::kFreshEachAttempt) spec_.master.port = free_loopback_port();   // a fresh rendezvous per attempt
    start_ranks(attempt, causes);
    const Outcome out = watch(attempt);
    Decision d;
    if (agent_ && out.kind == Outcome::Kind::kAbort && !agent_->lost().empty()) {
      d = decide(out, attempt, spec_.max_restarts);   // the launchers lost each other: nothing to agree on
    } else if (agent_) {
      int stopped_by = 0;
      const std::optional<Decision> agreed = agent_->finish(attempt, out, spec_.max_restarts, &stopped_by);
      if (!agreed) {
        say("got " + signal_name(stopped_by) + " while waiting for the other nodes; stopping");
        agent_->set_goodbye("got " + signal_name(stopped_by));
        stop_servers();
        return LaunchResult{128 + stopped_by, attempt, "got " + signal_name(stopped_by)};
      }
      d = *agreed;
    } else {
      d = decide(out, attempt, spec_.max_restarts);
    }
    if (d.kind == Decision::Kind::kRestart) {
      causes.push_back(d.cause);
      say(d.cause + "; restart " + std::to_string(attempt + 1) + " of " + std::to_string(spec_.max_restarts) +
          ": starting ranks " + rank_range() + " again");
      if (servers_) servers_->restart_ended();
      continue;
    }
    stop_servers();
    if (agent_) agent_->leave();
    if (d.kind == Decision::Kind::kOk) {
      say("all " + std::to_string(ranks_.size()) + " ranks finished" +
          (attempt > 0 ? " (after " + count_of(attempt, "restart") + ")" : std::string()));
      return LaunchResult{0, attempt, ""};
    }
    if (out.signal != 0) return LaunchResult{out.exit_code, attempt, out.cause};
    if (spec_.max_restarts == 0 && !d.summary.empty()) say("job failed: " + d.summary);
    else if (d.kind == Decision::Kind::kExhausted)
      say("job failed after " + count_of(attempt, "restart") + " (/max_restarts " +
          std::to_string(spec_.max_restarts) + "): " + d.cause);
    else if (!d.cause.empty()) say("job failed: " + d.cause);
    return LaunchResult{d.exit_code == 0 ? 1 : d.exit_code, attempt, d.cause};
  }
}

void Supervisor::stop_servers() {
  if (servers_) servers_->stop();
}

void Supervisor::start_ranks(int attempt, const std::vector<std::string>& causes) {
  ranks_.clear();
  ChildCommand command;
  command.program = spec_.program;
  command.args = spec_.args;
  // The job's servers of this attempt, as the train flag that names running servers.
  if (servers_) command.args.insert(command.args.end(), {"--ps-servers", servers_->addresses()});
  const auto& s = spec_;
  command.env = tls_env(s.tls);
  command.env.insert(command.env.end(), {{rpc::kJobTokenEnv, s.job_token},
                 {rpc::kRestartCountEnv, std::to_string(attempt)},
                 {rpc::kRestartCausesEnv, rpc::restart_causes_json(causes)},
                 {rpc::kMaxRestartsEnv, std::to_string(s.max_restarts)},
                 {"MASTER_ADDR", s.master.host},
                 {"MASTER_PORT", std::to_string(s.master.port)},
                 {"WORLD_SIZE", std::to_string(s.nnodes * s.nproc_per_node)},
                 {"LOCAL_WORLD_SIZE", std::to_string(s.nproc_per_node)},
                 {"GROUP_RANK", std::to_string(s.node_rank)}});
  const std::size_t per_rank = command.env.size();
  for (int local = 0; local < s.nproc_per_node; ++local) {
    const int rank = s.node_rank * s.nproc_per_node + local;
    command.env.resize(per_rank);
    command.env.emplace_back("RANK", std::to_string(rank));
    command.env.emplace_back("LOCAL_RANK", std::to_string(local));
    ranks_.push_back(std::make_unique<RankProcess>(rank, command, "[rank " + std::to_string(rank) + "] ", output_mutex_));
  }
  if (attempt > 0)
    say("attempt " + std::to_string(attempt) + ": ranks " + rank_range() + " started; rendezvous " + s.master.str());
}

// Watches one attempt until every rank of this node ended: the first failure (here, or announced by
// another node's launcher) stops the others (grace, SIGTERM, SIGKILL).
//
// The cause it names is the first rank or server that failed for a reason of its own: a rank that
// exited 5 only stopped because another one failed (an echo), and gives way to any other failure;
// a rank the launcher ended is no cause, unless it was stopped (SIGSTOP, ...) when the launcher ended
// it: it had hung, sending no heartbeat, which is what made the others stop (status 4).
Outcome Supervisor::watch(int attempt) {
  struct Failure {
    int index;
    pid_t pid;
    int status;
    enum class Of { kRank, kServer } of;
    int stop_signal = 0;   // a rank stopped by this signal when the launcher ended it

    bool echo() const { return of == Of::kRank && stop_signal == 0 && is_echo(status); }
    bool timed_out() const {
      return of == Of::kRank && stop_signal == 0 && WIFEXITED(status) && WEXITSTATUS(status) == kWaitTimedOut;
    }
  };
  std::optional<Failure> first;
  int interrupted_by = 0;
  std::string lost;
  bool remote = false, announced = false;
  std::optional<Clock::time_point> stop_by, kill_by;
  auto next_agent_poll = Clock::now();
  std::size_t running = ranks_.size();
  const auto start_grace = [&] {
    if (stop_by) return;
    stop_by = Clock::now() + millis(spec_.grace_seconds);
    if (running > 0)
      say("stopping the job: the other ranks get " + std::to_string(static_cast<int>(spec_.grace_seconds)) +
          " s to stop by themselves");
  };
  const auto terminate_now = [&] {
    for (auto& r : ranks_) r->terminate();   // a stopped rank also gets SIGCONT, to end at once
    if (!kill_by) kill_by = Clock::now() + kTermToKill;
  };
  // The root cause: the first failure, except that any other failure replaces an echo, and a
  // stopped rank replaces another rank's timeout (which it most likely caused).
  const auto failed = [&](const Failure& f) {
    if (!first || (first->echo() && !f.echo()) || (f.stop_signal != 0 && first->timed_out())) first = f;
    if (!kill_by) start_grace();
  };
  while (running > 0) {
    if (servers_) {
      for (const RankProcess* server : servers_->reap_ended()) {
        say("parameter server " + std::to_string(server->index()) + " (pid " + std::to_string(server->pid()) + ") " +
            describe_status(*server->status()) + " while the ranks ran");
        // Its shard's rows are gone: the ranks fail on their next pull; give them the grace to say so.
        failed(Failure{server->index(), server->pid(), *server->status(), Failure::Of::kServer});
      }
    }
    for (auto& r : ranks_) {
      if (r->status()) continue;
      if (!r->reap()) {
        r->poll_stopped();
        continue;
      }
      --running;
      const int status = *r->status();
      const std::string rank = "rank " + std::to_string(r->index()) + " (pid " + std::to_string(r->pid()) + ")";
      if (const auto& stop = r->stopped_when_ended()) {
        std::ostringstream since;
        since.precision(1);
        since << std::fixed << std::chrono::duration<double>(Clock::now() - stop->since).count();
        say(rank + " stopped (no heartbeat): " + describe_stop(stop->signal) + " " + since.str() +
            " s before the launcher ended it");
        failed(Failure{r->index(), r->pid(), status, Failure::Of::kRank, stop->signal});
        continue;
      }
      if (status == 0) continue;
      say(rank + " " + describe_status(status));
      if (r->ended_by() == EndedBy::kLauncher) continue;
      failed(Failure{r->index(), r->pid(), status, Failure::Of::kRank});
    }
    if (const int sig = hooks_.take_stop_request(); sig != 0) {
      say("got " + signal_name(sig) + "; stopping every rank");
      terminate_now();
      if (!interrupted_by) interrupted_by = sig;
    }
    if (agent_ && Clock::now() >= next_agent_poll && lost.empty()) {
      next_agent_poll = Clock::now() + kAgentPoll;
      if (!(lost = agent_->lost()).empty()) {
        say("stopping every rank: " + lost);
        terminate_now();
      } else if ((first || interrupted_by) && !announced) {
        agent_->announce_failure(attempt);
        announced = true;
      } else if (!first && !remote && agent_->failure_announced(attempt)) {
        remote = true;
        say("a rank on another node failed in attempt " + std::to_string(attempt) + "; stopping this node's ranks");
        start_grace();
      }
    }
    if (stop_by && !kill_by) {
      // A stopped rank cannot stop by itself: when only such ranks are left, the grace is over.
      bool only_stopped = running > 0;
      for (auto& r : ranks_) only_stopped = only_stopped && (r->status() || r->stop());
      if (only_stopped || Clock::now() > *stop_by) {
        for (auto& r : ranks_)
          if (!r->status())
            say("rank " + std::to_string(r->index()) +
                (r->stop() ? " is " + describe_stop(r->stop()->signal) + " and cannot stop by itself"
                           : std::string(" did not stop")) +
                "; terminating it");
        terminate_now();
      }
    }
    if (kill_by && Clock::now() > *kill_by) {
      for (auto& r : ranks_) r->signal(SIGKILL);
    }
    if (running > 0) std::this_thread::sleep_for(kPoll);
  }
  for (auto& r : ranks_) r->finish_output();   // the pipes closed with the ranks and their process groups
  if (agent_ && lost.empty()) lost = agent_->lost();
  if (agent_ && (first || interrupted_by) && !announced && lost.empty()) agent_->announce_failure(attempt);

  const std::string prefix = "attempt " + std::to_string(attempt) + ": ";
  if (interrupted_by)
    return Outcome{Outcome::Kind::kAbort,
                   prefix + "the launcher" + (spec_.nnodes > 1 ? " of node " + std::to_string(spec_.node_rank) : "") +
                       " got " + signal_name(interrupted_by),
                   "", 128 + interrupted_by, interrupted_by};
  if (!lost.empty()) return Outcome{Outcome::Kind::kAbort, lost, lost, 1};
  if (!first) return Outcome{};
  const std::string on_node = spec_.nnodes > 1 ? " on node " + std::to_string(spec_.node_rank) : "";
  const std::string index = std::to_string(first->index), pid = std::to_string(first->pid);
  if (first->of == Failure::Of::kServer)
    return Outcome{Outcome::Kind::kCause,
                   prefix + "parameter server " + index + " (pid " + pid + ")" + on_node + " " +
                       describe_status(first->status) + " while the ranks ran",
                   "a parameter server (shard " + index + ", pid " + pid + ") " + describe_status(first->status),
                   exit_code_of(first->status)};
  if (first->stop_signal != 0)   // it hung: the others' wait for its heartbeat ran past its timeout
    return Outcome{Outcome::Kind::kCause,
                   prefix + "rank " + index + " (pid " + pid + ")" + on_node + " stopped (no heartbeat): " +
                       describe_stop(first->stop_signal),
                   "rank " + index + " stopped (no heartbeat)", kWaitTimedOut};
  return Outcome{first->echo() ? Outcome::Kind::kEcho : Outcome::Kind::kCause,
                 prefix + "rank " + index + " (pid " + pid + ")" + on_node + " " + describe_status(first->status),
                 "rank " + index + " " + describe_status(first->status), exit_code_of(first->status)};
}

}  // namespace pw::launcher
