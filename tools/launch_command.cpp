#include "tools/launch_command.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include <thrift/TOutput.h>

#include "core/error.h"
#include "core/log.h"
#include "rpc/host_port.h"
#include "rpc/job_token.h"
#include "rpc/launch_env.h"
#include "rpc/rendezvous_client.h"
#include "rpc/rendezvous_server.h"
#include "train/parameter_servers.h"
#include "tools/train_command.h"

namespace pw::tools {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
constexpr auto kPoll = milliseconds(50);
constexpr auto kTermToKill = std::chrono::seconds(3);
constexpr auto kServerListenTimeout = std::chrono::seconds(30);
constexpr auto kGroupGone = std::chrono::seconds(5);   // for the processes a rank left, after SIGKILL
// The launchers of a multi-node job with restarts: how often one looks for another node's failure,
// and how their heartbeats to node 0's launcher go.
constexpr auto kAgentPoll = milliseconds(250);
constexpr auto kAgentBeat = milliseconds(500);
constexpr auto kAgentSilence = milliseconds(30000);
constexpr auto kAgentLeaveWait = milliseconds(10000);

std::atomic<int> g_signal{0};
extern "C" void remember_signal(int sig) { g_signal.store(sig); }

std::string signal_name(int sig) { return sigabbrev_np(sig) ? std::string("SIG") + sigabbrev_np(sig) : "signal " + std::to_string(sig); }

// A port nobody listens on now (the rendezvous binds it a moment later, as torchrun does).
int free_loopback_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  PW_CHECK(fd >= 0, "socket(): " << std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  close(fd);
  PW_CHECK(ok, "cannot find a free loopback port: " << std::strerror(errno));
  return ntohs(addr.sin_port);
}

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return "was killed by signal " + std::to_string(sig) + " (" + (sigabbrev_np(sig) ? std::string("SIG") + sigabbrev_np(sig) : "?") + ")";
  }
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

int exit_code_of(int status) { return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status); }

// `pipewright train` exits 5 when it stopped because another rank failed: an echo, not a cause.
constexpr int kStoppedByOtherRank = 5;
bool is_echo(int status) { return WIFEXITED(status) && WEXITSTATUS(status) == kStoppedByOtherRank; }

std::string one_line(std::string text) {
  std::replace_if(text.begin(), text.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
  return text;
}

std::string count_of(int n, const std::string& what) { return std::to_string(n) + " " + what + (n == 1 ? "" : "s"); }

// Copies a child's output to ours line by line with "[rank N] " in front.
class OutputForwarder {
 public:
  OutputForwarder(int fd, std::FILE* out, std::string prefix, std::mutex& mutex)
      : thread_([fd, out, prefix = std::move(prefix), &mutex] {
          std::string pending;
          char buf[4096];
          const auto emit = [&](const std::string& line) {
            std::lock_guard lock(mutex);
            std::fprintf(out, "%s%s\n", prefix.c_str(), line.c_str());
            std::fflush(out);
          };
          for (;;) {
            const ssize_t n = read(fd, buf, sizeof buf);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            pending.append(buf, static_cast<std::size_t>(n));
            for (std::size_t nl; (nl = pending.find_first_of("\n\r")) != std::string::npos;) {
              if (nl > 0) emit(pending.substr(0, nl));
              pending.erase(0, nl + 1);
            }
          }
          if (!pending.empty()) emit(pending);
          close(fd);
        }) {}
  ~OutputForwarder() {
    if (thread_.joinable()) thread_.join();
  }
  OutputForwarder(const OutputForwarder&) = delete;
  OutputForwarder& operator=(const OutputForwarder&) = delete;

 private:
  std::thread thread_;
};

// A started rank or parameter server. Each runs in its own process group (its pid), so that
// stopping it also stops whatever it started.
struct Proc {
  int index = 0;               // the rank, or the server's shard
  pid_t pid = -1;
  std::optional<int> status;   // set once reaped
  bool signalled = false;      // the launcher stopped it: its status is no cause
};

void signal_group(const Proc& p, int sig) {
  if (!p.status) kill(-p.pid, sig);
}

// True once `p` has ended. What it left running in its group is killed before it is reaped (while
// its pid, still a zombie, names the group) and waited for (the launcher is their subreaper), so
// nothing of it outlives it: a restarted rank never meets a process of the attempt before.
bool reap(Proc& p) {
  if (p.status) return true;
  siginfo_t info{};
  if (waitid(P_PID, static_cast<id_t>(p.pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid != p.pid)
    return false;
  kill(-p.pid, SIGKILL);
  int status = 0;
  while (waitpid(p.pid, &status, 0) < 0 && errno == EINTR) {
  }
  p.status = status;
  const auto gone_by = Clock::now() + kGroupGone;
  for (;;) {
    while (waitpid(-p.pid, nullptr, WNOHANG) > 0) {
    }
    if (kill(-p.pid, 0) != 0 || Clock::now() > gone_by) break;   // ESRCH: nobody is left in the group
    std::this_thread::sleep_for(milliseconds(5));
  }
  return true;
}

void set_env(const char* name, const std::string& value) { setenv(name, value.c_str(), 1); }

// In the child: exports the rank's environment and runs `program` (empty: this executable, as
// `pipewright <args>`) with `args`.
[[noreturn]] void exec_rank(const std::string& program, const std::vector<std::string>& args, int out_fd, int err_fd,
                            pid_t launcher) {
  // The rank dies with its launcher, so a killed launcher leaves no rank behind.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != launcher) _exit(127);
  setpgid(0, 0);
  dup2(out_fd, STDOUT_FILENO);
  dup2(err_fd, STDERR_FILENO);
  // Nothing else of the launcher's (its connections to the other launchers): a rank, or what it
  // leaves running, must not keep them open after the launcher is gone (as torchrun's close_fds).
  if (close_range(3, ~0U, 0) != 0)
    for (int fd = 3; fd < 4096; ++fd) close(fd);
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(program.empty() ? "pipewright" : program.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  if (program.empty()) execv("/proc/self/exe", argv.data());
  else execvp(program.c_str(), argv.data());
  std::fprintf(stderr, "pipewright launch: cannot start the rank (%s): %s\n",
               program.empty() ? "pipewright" : program.c_str(), std::strerror(errno));
  _exit(127);
}

// Whether something accepts TCP connections at 127.0.0.1:port.
bool accepts(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  close(fd);
  return ok;
}

// What one attempt came to on this node, and what every node does next.
struct Outcome {
  enum class Kind { kOk, kCause, kEcho, kAbort };
  Kind kind = Kind::kOk;   // kOk also when its ranks were stopped because another node failed
  std::string cause;       // one line, "attempt N: rank R (pid P) ..."
  std::string summary;     // the line `launch` without restarts ends with ("rank R exited with status 3")
  int exit_code = 0;
  bool interrupted = false;   // this launcher got SIGINT/SIGTERM: it ends with 128 + the signal, saying nothing more
};

struct Decision {
  enum class Kind { kOk, kRestart, kFail };
  Kind kind = Kind::kOk;
  std::string cause, summary;
  int exit_code = 0;
  bool exhausted = false;   // failed because no restart was left (not an abort)
};

Decision decide(const Outcome& out, int attempt, int max_restarts) {
  Decision d{Decision::Kind::kOk, out.cause, out.summary, out.exit_code, false};
  if (out.kind == Outcome::Kind::kOk) return d;
  if (out.kind == Outcome::Kind::kAbort) d.kind = Decision::Kind::kFail;
  else if (attempt < max_restarts) d.kind = Decision::Kind::kRestart;
  else {
    d.kind = Decision::Kind::kFail;
    d.exhausted = true;
  }
  if (d.exit_code == 0) d.exit_code = 1;
  return d;
}

// Errors of the launchers' coordination: one line, ends the job with status 1.
class CoordinationError : public Error {
 public:
  using Error::Error;
};

// A store value: "<kind> <exit code> <exhausted>\n<cause>\n<summary>".
std::string encode(int kind, int exit_code, bool exhausted, const std::string& cause, const std::string& summary) {
  return std::to_string(kind) + " " + std::to_string(exit_code) + " " + (exhausted ? "1" : "0") + "\n" +
         one_line(cause) + "\n" + one_line(summary);
}

struct Decoded {
  int kind = 0, exit_code = 0;
  bool exhausted = false;
  std::string cause, summary;
};

Decoded decode(const std::string& value) {
  Decoded d;
  const auto nl = value.find('\n');
  const auto nl2 = nl == std::string::npos ? std::string::npos : value.find('\n', nl + 1);
  int exhausted = 0;
  if (nl2 == std::string::npos ||
      std::sscanf(value.substr(0, nl).c_str(), "%d %d %d", &d.kind, &d.exit_code, &exhausted) != 3)
    throw CoordinationError("a malformed message between the launchers: '" + one_line(value) + "'");
  d.exhausted = exhausted != 0;
  d.cause = value.substr(nl + 1, nl2 - nl - 1);
  d.summary = value.substr(nl2 + 1);
  return d;
}

// The launchers of a job of several nodes, with --max-restarts, coordinate through a rendezvous
// service node 0's launcher serves at the master host, port + 1 (the same Rendezvous service rank 0
// runs for the ranks, with one "rank" per node and the same job token). Each launcher joins it before
// any rank starts and keeps a heartbeat to it, so that a lost launcher ends the job on every node.
// Per attempt n:
//   - a launcher whose ranks fail sets "failed/<n>"; the others look for it every 250 ms and stop
//     their ranks as for a local failure (grace, SIGTERM, SIGKILL);
//   - once all its ranks ended, each launcher sets "result/<n>/<node>" and waits at barrier
//     "end/<n>", so no rank of attempt n+1 starts while any rank of attempt n lives;
//   - node 0's launcher reads every result and sets "decision/<n>" (done, restart or fail, and the
//     cause), which every launcher acts on: all restart together, with the same count and causes.
class NodeAgent {
 public:
  NodeAgent(const rpc::HostPort& master, const std::string& token, int node, int nnodes, int max_restarts,
            milliseconds timeout)
      : node_(node), nnodes_(nnodes), timeout_(timeout) {
    PW_INPUT_CHECK(master.port < 65535, "--master " << master.str() << ": with --max-restarts the launchers meet at "
                                                    "port + 1; give a port below 65535");
    address_ = rpc::HostPort{master.host, master.port + 1};
    // (A constructor that throws runs no destructor: the others hear why from here.)
    struct TellOnError {
      NodeAgent& agent;
      int pending = std::uncaught_exceptions();
      ~TellOnError() {
        if (std::uncaught_exceptions() > pending && agent.client_)
          agent.client_->report_failure(agent.goodbye_.empty() ? "its launcher ended" : agent.goodbye_);
      }
    } tell_on_error{*this};
    guarded("joining", [&] {
      if (node_ == 0)
        server_ = std::make_unique<rpc::RendezvousServer>(address_, rpc::RendezvousConfig{nnodes, nnodes, token, kAgentSilence});
      client_ = std::make_unique<rpc::RendezvousClient>(address_, token, node_);
      const auto deadline = Clock::now() + timeout_;
      const std::string late = "the launchers of the other nodes did not join within " + seconds_text() +
                               " (--node-timeout); start one on every node with the same --nnodes, --master, "
                               "PW_JOB_TOKEN and --max-restarts";
      if (node_ == 0) client_->set("max_restarts", std::to_string(max_restarts));
      const std::string me = rpc::HostPort{rpc::local_address_towards(master.host), address_.port}.str();
      patiently(deadline, late, [&](Clock::time_point by) { client_->register_rank(me, by); });
      if (node_ != 0) {
        std::string theirs;
        patiently(deadline, late, [&](Clock::time_point by) { theirs = client_->get("max_restarts", by); });
        if (theirs != std::to_string(max_restarts)) {
          const std::string why = "--max-restarts " + std::to_string(max_restarts) + " on node " +
                                  std::to_string(node_) + " but " + theirs + " on node 0; give every node's launcher "
                                  "the same --max-restarts";
          client_->report_failure(why);
          throw InputError(why);
        }
      }
      patiently(deadline, late, [&](Clock::time_point by) { client_->barrier("joined", by); });
    });
    heartbeat_ = std::make_unique<rpc::Heartbeat>(address_, token, node_, kAgentBeat, kAgentSilence,
                                                  [this](const std::string& reason) {
                                                    std::lock_guard lock(mutex_);
                                                    lost_ = clean(reason);
                                                  });
  }

  // A launcher that ends without leave() (a signal, an error) tells the others why, so that they
  // stop at once instead of waiting for its heartbeat to go silent.
  ~NodeAgent() {
    if (!left_ && client_) client_->report_failure(goodbye_.empty() ? "its launcher ended" : goodbye_);
    heartbeat_.reset();
    client_.reset();
    server_.reset();
  }

  const rpc::HostPort& address() const { return address_; }
  void set_goodbye(const std::string& why) { goodbye_ = why; }   // what the others hear should this launcher end early

  // Why the launchers' coordination broke ("" while it holds): a launcher was lost or silent.
  std::string lost() const {
    std::lock_guard lock(mutex_);
    return lost_;
  }

  // Tells the other launchers that this node's ranks failed in `attempt`.
  void announce_failure(int attempt) {
    try {
      client_->set("failed/" + std::to_string(attempt), std::to_string(node_));
    } catch (const Error& e) {
      note_lost(e);
    }
  }

  // Whether another launcher announced a failure in `attempt` (does not wait).
  bool failure_announced(int attempt) {
    try {
      client_->get("failed/" + std::to_string(attempt), Clock::now());
      return true;
    } catch (const rpc::TimeoutError&) {
      return false;
    } catch (const Error& e) {
      note_lost(e);
      return false;
    }
  }

  // After this node's ranks of `attempt` all ended: reports its outcome, waits for every other
  // launcher to get there, and returns what node 0's launcher decided. Nothing when `interrupted`
  // says so while waiting. Throws CoordinationError when a launcher is lost or late.
  std::optional<Decision> finish(int attempt, const Outcome& mine, int max_restarts,
                                 const std::function<bool()>& interrupted) {
    const std::string n = std::to_string(attempt);
    std::optional<Decision> decision;
    guarded("ending attempt " + n, [&] {
      client_->set("result/" + n + "/" + std::to_string(node_),
                   encode(static_cast<int>(mine.kind), mine.exit_code, false, mine.cause, mine.summary));
      const auto deadline = Clock::now() + timeout_;
      for (;;) {
        try {
          client_->barrier("end/" + n, std::min(deadline, Clock::now() + std::chrono::seconds(1)));
          break;
        } catch (const rpc::TimeoutError&) {
          if (interrupted()) return;
          if (Clock::now() >= deadline)
            throw CoordinationError("the launchers of the other nodes did not end attempt " + n + " within " +
                                    seconds_text() + " (--node-timeout)");
        }
      }
      if (node_ == 0) client_->set("decision/" + n, decide_for_all(attempt, max_restarts, deadline));
      const Decoded d = decode(client_->get("decision/" + n, Clock::now() + timeout_));
      decision = Decision{static_cast<Decision::Kind>(d.kind), d.cause, d.summary, d.exit_code, d.exhausted};
    });
    return decision;
  }

  // The job is over (done, or failed for good): leaves without being taken for a lost launcher;
  // node 0's launcher keeps serving until the others left (at most 10 s).
  void leave() noexcept {
    left_ = true;
    heartbeat_->stop();
    try {
      client_->leave();
    } catch (...) {
    }
    if (server_) server_->wait_until_all_left(kAgentLeaveWait);
  }

 private:
  // Node 0's launcher: every node's result → one decision. The cause is an abort's (a launcher
  // stopped by a signal) if any, else a real failure (preferring the node that announced first),
  // else a rank that only stopped because others failed.
  std::string decide_for_all(int attempt, int max_restarts, Clock::time_point deadline) {
    const std::string n = std::to_string(attempt);
    std::vector<Decoded> results;
    for (int node = 0; node < nnodes_; ++node) results.push_back(decode(client_->get("result/" + n + "/" + std::to_string(node), deadline)));
    int announcer = -1;
    try {
      announcer = std::stoi(client_->get("failed/" + n, Clock::now()));
    } catch (const rpc::TimeoutError&) {
    } catch (const std::logic_error&) {
    }
    const auto find = [&](Outcome::Kind kind) -> const Decoded* {
      const auto k = static_cast<int>(kind);
      if (announcer >= 0 && announcer < nnodes_ && results[static_cast<std::size_t>(announcer)].kind == k)
        return &results[static_cast<std::size_t>(announcer)];
      for (const auto& r : results)
        if (r.kind == k) return &r;
      return nullptr;
    };
    const Decoded* pick = find(Outcome::Kind::kAbort);
    if (!pick) pick = find(Outcome::Kind::kCause);
    if (!pick) pick = find(Outcome::Kind::kEcho);
    Outcome out;
    if (pick) out = Outcome{static_cast<Outcome::Kind>(pick->kind), pick->cause, pick->summary, pick->exit_code};
    const Decision d = decide(out, attempt, max_restarts);
    return encode(static_cast<int>(d.kind), d.exit_code, d.exhausted, d.cause, d.summary);
  }

  std::string seconds_text() const { return std::to_string(timeout_.count() / 1000) + " s"; }

  // Runs `call(by)` in waits of at most a second until it returns, so that SIGINT/SIGTERM are heard;
  // CoordinationError saying `late` at the deadline.
  template <typename Call>
  void patiently(Clock::time_point deadline, const std::string& late, Call call) {
    for (;;) {
      try {
        call(std::min(deadline, Clock::now() + std::chrono::seconds(1)));
        return;
      } catch (const rpc::TimeoutError&) {
        if (const int sig = g_signal.load(); sig != 0) {
          goodbye_ = "got " + signal_name(sig);
          throw CoordinationError("got " + signal_name(sig) + " while waiting for the other nodes' launchers");
        }
        if (Clock::now() >= deadline) throw CoordinationError(late);
      }
    }
  }

  // "rank 1 (stage 1)" in the service's messages is node 1's launcher.
  std::string clean(std::string text) const {
    for (int r = 0; r < nnodes_; ++r) {
      const std::string from = "rank " + std::to_string(r) + " (stage " + std::to_string(r) + ")";
      const std::string to = "node " + std::to_string(r) + "'s launcher";
      for (std::size_t at; (at = text.find(from)) != std::string::npos;) text.replace(at, from.size(), to);
    }
    const std::string me = "rank " + std::to_string(node_) + ": rendezvous at";
    if (text.rfind(me, 0) == 0) text.replace(0, me.size(), "node " + std::to_string(node_) + "'s launcher: rendezvous at");
    return one_line(text);
  }

  // The service's "job stopped: <why>" is <why> (another launcher failed or was lost); anything else
  // is this launcher's trouble reaching the service.
  std::string reason_of(const Error& e) const {
    const std::string text = e.what(), stopped = "job stopped: ";
    if (dynamic_cast<const rpc::AbortedError*>(&e) != nullptr && text.rfind(stopped, 0) == 0)
      return clean(text.substr(stopped.size()));
    return "the launchers' rendezvous at " + address_.str() + " failed: " + clean(text);
  }

  void note_lost(const Error& e) {
    std::lock_guard lock(mutex_);
    if (lost_.empty()) lost_ = reason_of(e);
  }

  template <typename Body>
  void guarded(const std::string& what, Body body) {
    try {
      body();
    } catch (const InputError&) {
      throw;
    } catch (const CoordinationError&) {
      throw;
    } catch (const rpc::AbortedError& e) {
      throw CoordinationError(reason_of(e));
    } catch (const Error& e) {
      throw CoordinationError("node " + std::to_string(node_) + "'s launcher, " + what + " (launchers' rendezvous at " +
                              address_.str() + "): " + clean(e.what()));
    }
  }

  int node_, nnodes_;
  milliseconds timeout_;
  rpc::HostPort address_;
  std::unique_ptr<rpc::RendezvousServer> server_;
  std::unique_ptr<rpc::RendezvousClient> client_;
  std::unique_ptr<rpc::Heartbeat> heartbeat_;
  mutable std::mutex mutex_;
  std::string lost_;
  bool left_ = false;
  std::string goodbye_;
};

// One node's launcher: starts the parameter servers once and the ranks once per attempt, watches
// them, and restarts the ranks after a failure while restarts are left.
class Launcher {
 public:
  Launcher(const LaunchOptions& o, std::string program, std::vector<std::string> args, rpc::HostPort master)
      : o_(o), program_(std::move(program)), args_(std::move(args)), master_(std::move(master)),
        world_(o.nnodes * o.nproc_per_node), self_(getpid()) {}

  // Whatever is still running when an error leaves (a failed start) is stopped before it goes up.
  ~Launcher() {
    for (auto* group : {&ranks_, &servers_}) {
      for (auto& p : *group) signal_group(p, SIGKILL);
      for (auto& p : *group)
        if (!p.status) waitpid(p.pid, nullptr, 0);
    }
    rank_forwarders_.clear();
    server_forwarders_.clear();
  }

  int run() {
    if (o_.ps > 0) start_servers();
    if (o_.nnodes > 1 && o_.max_restarts > 0) {
      // The service's own warnings name launchers as ranks; what matters, this launcher says itself.
      if (log::level() < log::Level::Error) log::set_level(log::Level::Error);
      // Thrift reports every refused connect while node 0's launcher starts; the waits have deadlines.
      apache::thrift::GlobalOutput.setOutputFunction([](const char* message) { PW_LOG(Debug, "thrift: " << message); });
      agent_ = std::make_unique<NodeAgent>(master_, token(), o_.node_rank, o_.nnodes, o_.max_restarts,
                                           milliseconds(static_cast<std::int64_t>(o_.node_timeout_seconds * 1000)));
      say("node " + std::to_string(o_.node_rank) + ": every node's launcher joined at " + agent_->address().str() +
          " (restarts are decided by node 0's launcher)");
    }
    std::vector<std::string> causes;
    for (int attempt = 0;; ++attempt) {
      if (const int sig = g_signal.exchange(0); sig != 0) {
        say("got " + signal_name(sig) + " before attempt " + std::to_string(attempt) + " started; stopping");
        if (agent_) agent_->set_goodbye("got " + signal_name(sig));
        stop_servers();
        return 128 + sig;
      }
      if (attempt > 0 && o_.master.empty()) master_.port = free_loopback_port();   // a fresh rendezvous per attempt
      start_ranks(attempt, causes);
      const Outcome out = watch(attempt);
      Decision d;
      if (agent_ && out.kind == Outcome::Kind::kAbort && !agent_->lost().empty()) {
        d = decide(out, attempt, o_.max_restarts);   // the launchers lost each other: nothing to agree on
      } else if (agent_) {
        std::optional<Decision> agreed;
        int interrupted_by = 0;
        agreed = agent_->finish(attempt, out, o_.max_restarts, [&] { return (interrupted_by = g_signal.exchange(0)) != 0; });
        if (!agreed) {
          say("got " + signal_name(interrupted_by) + " while waiting for the other nodes; stopping");
          agent_->set_goodbye("got " + signal_name(interrupted_by));
          stop_servers();
          return 128 + interrupted_by;
        }
        d = *agreed;
      } else {
        d = decide(out, attempt, o_.max_restarts);
      }
      if (d.kind == Decision::Kind::kRestart) {
        causes.push_back(d.cause);
        say(d.cause + "; restart " + std::to_string(attempt + 1) + " of " + std::to_string(o_.max_restarts) +
            ": starting ranks " + rank_range() + " again");
        restart_failed_servers();
        continue;
      }
      stop_servers();
      if (agent_) agent_->leave();
      if (d.kind == Decision::Kind::kOk) {
        say("all " + std::to_string(ranks_.size()) + " ranks finished" +
            (attempt > 0 ? " (after " + count_of(attempt, "restart") + ")" : std::string()));
        return 0;
      }
      if (out.interrupted) return out.exit_code;
      if (o_.max_restarts == 0 && !d.summary.empty()) say("job failed: " + d.summary);
      else if (d.exhausted)
        say("job failed after " + count_of(attempt, "restart") + " (--max-restarts " + std::to_string(o_.max_restarts) +
            "): " + d.cause);
      else if (!d.cause.empty()) say("job failed: " + d.cause);
      return d.exit_code == 0 ? 1 : d.exit_code;
    }
  }

 private:
  static std::string token() { return std::getenv(rpc::kJobTokenEnv); }

  std::string rank_range() const {
    return std::to_string(o_.node_rank * o_.nproc_per_node) + "-" + std::to_string((o_.node_rank + 1) * o_.nproc_per_node - 1);
  }

  void say(const std::string& line) {
    std::lock_guard lock(output_mutex_);
    std::fprintf(stderr, "pipewright launch: %s\n", line.c_str());
    std::fflush(stderr);
  }

  pid_t spawn(const std::string& child_program, const std::vector<std::string>& child_args, const std::string& prefix,
              std::vector<std::unique_ptr<OutputForwarder>>& forwarders) {
    int out_pipe[2], err_pipe[2];
    PW_CHECK(pipe2(out_pipe, O_CLOEXEC) == 0 && pipe2(err_pipe, O_CLOEXEC) == 0, "pipe(): " << std::strerror(errno));
    const pid_t pid = fork();
    PW_CHECK(pid >= 0, "fork(): " << std::strerror(errno));
    if (pid == 0) exec_rank(child_program, child_args, out_pipe[1], err_pipe[1], self_);
    setpgid(pid, pid);   // also in the child: whichever runs first
    close(out_pipe[1]);
    close(err_pipe[1]);
    forwarders.push_back(std::make_unique<OutputForwarder>(out_pipe[0], stdout, prefix, output_mutex_));
    forwarders.push_back(std::make_unique<OutputForwarder>(err_pipe[0], stderr, prefix, output_mutex_));
    return pid;
  }

  void start_servers() {
    PW_INPUT_CHECK(o_.nnodes == 1, "--ps starts the parameter servers of a single-node job; for " << o_.nnodes
                                   << " nodes start them with pipewright ps serve and give train --ps-servers");
    PW_INPUT_CHECK(args_.front() == "train", "pipewright launch --ps serves the embedding tables of a train job; got '"
                                                 << args_.front() << "' after --");
    const train::JobConfig job = job_config_of_train_args(args_);
    std::string addresses;
    for (int shard = 0; shard < o_.ps; ++shard) {
      // The same servers `train --ps` runs as threads (a bad --ps-mode fails here, before anything starts).
      const dp::PsShardConfig c = train::ps_shard_config(job, shard, o_.ps);
      const int port = free_loopback_port();
      std::vector<std::string> serve = {"ps", "serve", "--bind", "127.0.0.1:" + std::to_string(port), "--shard",
                                        std::to_string(c.shard), "--shards", std::to_string(c.shards), "--workers",
                                        std::to_string(c.workers), "--mode", dp::update_mode_name(c.mode)};
      if (!o_.ps_dir.empty()) {
        serve.push_back("--dir");
        serve.push_back(o_.ps_dir + "/shard" + std::to_string(shard));
      }
      if (c.bounds) {
        // Every bound, so that the server refuses a table made with others.
        for (const auto& flag : {std::pair<const char*, std::int64_t>{"--admit-after", c.bounds->admit_after},
                                 {"--max-rows", c.bounds->max_rows}, {"--row-ttl", c.bounds->row_ttl}})
          if (flag.second > 0) {
            serve.push_back(flag.first);
            serve.push_back(std::to_string(flag.second));
          }
      }
      server_args_.push_back(serve);
      server_ports_.push_back(port);
      servers_.push_back(Proc{shard, spawn("", serve, server_prefix(shard), server_forwarders_)});
      addresses += (addresses.empty() ? "" : ",") + ("127.0.0.1:" + std::to_string(port));
    }
    // The ranks' first pull must find every server listening.
    for (int shard = 0; shard < o_.ps; ++shard) wait_listening(shard);
    set_env(train::kPsServersEnv, addresses);
    std::fprintf(stderr, "pipewright launch: %d parameter servers (%s, %d workers) at %s\n", o_.ps,
                 dp::update_mode_name(job.ps.mode), job.replicas.replicas, addresses.c_str());
  }

  static std::string server_prefix(int shard) { return "[ps " + std::to_string(shard) + "] "; }

  void wait_listening(int shard) {
    auto& server = servers_[static_cast<std::size_t>(shard)];
    const int port = server_ports_[static_cast<std::size_t>(shard)];
    const auto ready_by = Clock::now() + kServerListenTimeout;
    while (!accepts(port)) {
      if (reap(server))
        throw InputError("parameter server " + std::to_string(shard) + " " + describe_status(*server.status) +
                         " before it listened (see its output above)");
      PW_INPUT_CHECK(Clock::now() < ready_by, "parameter server " << shard << " did not listen on 127.0.0.1:" << port
                                                                  << " within 30 s");
      std::this_thread::sleep_for(milliseconds(20));
    }
  }

  // A parameter server that ended during the attempt starts again on its port (from its snapshot
  // under --ps-dir, if given); the others keep running with their tables.
  void restart_failed_servers() {
    for (auto& server : servers_) {
      if (!server.status && !reap(server)) continue;
      const int shard = server.index;
      for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                               "MASTER_PORT", rpc::kRestartCountEnv, rpc::kRestartCausesEnv, rpc::kMaxRestartsEnv})
        unsetenv(name);   // a server is no rank (start_ranks sets them again)
      say("parameter server " + std::to_string(shard) + " starts again on 127.0.0.1:" +
          std::to_string(server_ports_[static_cast<std::size_t>(shard)]) +
          (o_.ps_dir.empty() ? " (empty: no --ps-dir)" : " (from its snapshot in " + o_.ps_dir + ")"));
      server = Proc{shard, spawn("", server_args_[static_cast<std::size_t>(shard)], server_prefix(shard), server_forwarders_)};
      wait_listening(shard);
    }
  }

  // The servers write their last snapshot on SIGTERM; SIGKILL after kTermToKill.
  void stop_servers() {
    for (auto& server : servers_)
      if (!reap(server)) signal_group(server, SIGTERM);
    const auto servers_by = Clock::now() + kTermToKill;
    for (auto& server : servers_) {
      while (!reap(server)) {
        if (Clock::now() > servers_by) signal_group(server, SIGKILL);
        std::this_thread::sleep_for(kPoll);
      }
    }
    server_forwarders_.clear();
  }

  void start_ranks(int attempt, const std::vector<std::string>& causes) {
    ranks_.clear();
    set_env(rpc::kRestartCountEnv, std::to_string(attempt));
    set_env(rpc::kRestartCausesEnv, rpc::restart_causes_json(causes));
    set_env(rpc::kMaxRestartsEnv, std::to_string(o_.max_restarts));
    set_env("MASTER_ADDR", master_.host);
    set_env("MASTER_PORT", std::to_string(master_.port));
    for (int local = 0; local < o_.nproc_per_node; ++local) {
      const int rank = o_.node_rank * o_.nproc_per_node + local;
      set_env("RANK", std::to_string(rank));
      set_env("WORLD_SIZE", std::to_string(world_));
      set_env("LOCAL_RANK", std::to_string(local));
      set_env("LOCAL_WORLD_SIZE", std::to_string(o_.nproc_per_node));
      set_env("GROUP_RANK", std::to_string(o_.node_rank));
      ranks_.push_back(Proc{rank, spawn(program_, args_, "[rank " + std::to_string(rank) + "] ", rank_forwarders_)});
    }
    if (attempt > 0)
      say("attempt " + std::to_string(attempt) + ": ranks " + rank_range() + " started; rendezvous " + master_.str());
  }

  // Watches one attempt until every rank of this node ended: the first failure (here, or announced
  // by another node's launcher) stops the others as without restarts (grace, SIGTERM, SIGKILL).
  Outcome watch(int attempt) {
    struct Failure {
      int index;
      pid_t pid;
      int status;
      bool server;
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
      stop_by = Clock::now() + milliseconds(static_cast<std::int64_t>(o_.grace_seconds * 1000));
      if (running > 0)
        say("stopping the job: the other ranks get " + std::to_string(static_cast<int>(o_.grace_seconds)) +
            " s to stop by themselves");
    };
    const auto terminate_now = [&] {
      for (auto& r : ranks_)
        if (!r.status) {
          r.signalled = true;
          signal_group(r, SIGTERM);
        }
      if (!kill_by) kill_by = Clock::now() + kTermToKill;
    };
    while (running > 0) {
      for (auto& r : ranks_) {
        if (r.status || !reap(r)) continue;
        --running;
        const int status = *r.status;
        if (status == 0) continue;
        say("rank " + std::to_string(r.index) + " (pid " + std::to_string(r.pid) + ") " + describe_status(status));
        // The root cause: the first rank that failed by itself (killed, crashed, bad input),
        // else the first that stopped.
        if (r.signalled) continue;
        if (first && !first->server && is_echo(first->status) && !is_echo(status)) first = Failure{r.index, r.pid, status, false};
        if (!first) {
          first = Failure{r.index, r.pid, status, false};
          start_grace();
        }
      }
      for (auto& server : servers_) {
        if (server.status || !reap(server)) continue;
        say("parameter server " + std::to_string(server.index) + " (pid " + std::to_string(server.pid) + ") " +
            describe_status(*server.status) + " while the ranks ran");
        if (!first) {
          // Its shard's rows are gone: the ranks fail on their next pull; give them the grace to say so.
          first = Failure{server.index, server.pid, *server.status, true};
          start_grace();
        }
      }
      if (const int sig = g_signal.exchange(0); sig != 0) {
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
      if (stop_by && Clock::now() > *stop_by && !kill_by) {
        for (auto& r : ranks_)
          if (!r.status) say("rank " + std::to_string(r.index) + " did not stop; terminating it");
        terminate_now();
      }
      if (kill_by && Clock::now() > *kill_by) {
        for (auto& r : ranks_) signal_group(r, SIGKILL);
      }
      if (running > 0) std::this_thread::sleep_for(kPoll);
    }
    rank_forwarders_.clear();   // the pipes closed with the ranks and their process groups
    if (agent_ && lost.empty()) lost = agent_->lost();
    if (agent_ && (first || interrupted_by) && !announced && lost.empty()) agent_->announce_failure(attempt);

    const std::string prefix = "attempt " + std::to_string(attempt) + ": ";
    if (interrupted_by)
      return Outcome{Outcome::Kind::kAbort,
                     prefix + "the launcher" + (o_.nnodes > 1 ? " of node " + std::to_string(o_.node_rank) : "") +
                         " got " + signal_name(interrupted_by),
                     "", 128 + interrupted_by, true};
    if (!lost.empty()) return Outcome{Outcome::Kind::kAbort, lost, lost, 1};
    if (!first) return Outcome{};
    const std::string on_node = o_.nnodes > 1 ? " on node " + std::to_string(o_.node_rank) : "";
    if (first->server)
      return Outcome{Outcome::Kind::kCause,
                     prefix + "parameter server " + std::to_string(first->index) + " (pid " + std::to_string(first->pid) +
                         ")" + on_node + " " + describe_status(first->status) + " while the ranks ran",
                     "a parameter server " + describe_status(first->status), 1};
    return Outcome{is_echo(first->status) ? Outcome::Kind::kEcho : Outcome::Kind::kCause,
                   prefix + "rank " + std::to_string(first->index) + " (pid " + std::to_string(first->pid) + ")" +
                       on_node + " " + describe_status(first->status),
                   "rank " + std::to_string(first->index) + " " + describe_status(first->status),
                   exit_code_of(first->status)};
  }

  const LaunchOptions& o_;
  std::string program_;
  std::vector<std::string> args_;
  rpc::HostPort master_;
  int world_;
  pid_t self_;
  std::mutex output_mutex_;
  std::vector<Proc> ranks_, servers_;
  std::vector<std::vector<std::string>> server_args_;
  std::vector<int> server_ports_;
  std::vector<std::unique_ptr<OutputForwarder>> rank_forwarders_, server_forwarders_;
  std::unique_ptr<NodeAgent> agent_;
};

}  // namespace

void add_launch_command(CLI::App& app, LaunchOptions& o) {
  auto* cmd = app.add_subcommand("launch", "start this node's ranks of a multi-process job: pipewright launch "
                                           "--nproc-per-node N [--nnodes K --node-rank I --master HOST:PORT] "
                                           "[--max-restarts R] -- <train arguments>");
  cmd->add_option("--nproc-per-node", o.nproc_per_node, "ranks on this node")->capture_default_str()
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--nnodes", o.nnodes, "nodes in the job")->capture_default_str()->check(CLI::Range(1, 65536));
  cmd->add_option("--node-rank", o.node_rank, "this node's index, 0 to nnodes-1")->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--master", o.master,
                  "HOST:PORT of node 0, where rank 0 serves the rendezvous (default 127.0.0.1 and a free port; "
                  "required with --nnodes > 1)");
  cmd->add_option("--grace", o.grace_seconds,
                  "seconds the other ranks get to stop by themselves after one fails, before they are killed")
      ->capture_default_str()->check(CLI::Range(0.0, 3600.0));
  cmd->add_option("--max-restarts", o.max_restarts,
                  "after a rank fails and the others stopped, start every rank again, at most this many times "
                  "(each attempt sees PW_RESTART_COUNT and PW_RESTART_CAUSES); with --nnodes > 1 every node restarts "
                  "together")
      ->capture_default_str()->check(CLI::Range(0, 1000000));
  cmd->add_option("--node-timeout", o.node_timeout_seconds,
                  "with --nnodes > 1 and --max-restarts: seconds a launcher waits for the other nodes' launchers "
                  "(to join, and to end an attempt)")
      ->capture_default_str()->check(CLI::Range(1.0, 86400.0));
  cmd->add_option("--ps", o.ps, "parameter servers to start (pipewright ps serve, one shard each, on loopback) "
                                "for the embedding tables of a --model dlrm job; single-node jobs")
      ->capture_default_str()->check(CLI::Range(0, 64));
  cmd->add_option("--ps-dir", o.ps_dir, "with --ps: the servers keep their shards here (snapshots and logs) and "
                                        "resume from them");
  cmd->add_option("command", o.command, "after --: pipewright arguments (-- train --model seed-cnn --stages 4) or any program "
                                    "and its arguments (-- build/bin/example_custom_cnn --steps 50)")
      ->required();
  cmd->callback([&o] { std::exit(run_launch(o)); });
}

int run_launch(const LaunchOptions& o) {
  PW_INPUT_CHECK(o.node_rank < o.nnodes, "--node-rank " << o.node_rank << " outside --nnodes " << o.nnodes
                                                        << "; expected 0 to " << o.nnodes - 1);
  std::string token;
  if (auto from_env = rpc::job_token_from_env()) token = *from_env;
  PW_INPUT_CHECK(o.nnodes == 1 || !token.empty(), "a job of " << o.nnodes << " nodes needs the same job token on every "
                                                  "node: export " << rpc::kJobTokenEnv
                                                  << "=<secret> (e.g. $(openssl rand -hex 16)) before each launch");
  if (token.empty()) token = rpc::make_job_token();
  PW_INPUT_CHECK(o.nnodes == 1 || !o.master.empty(),
                 "--nnodes " << o.nnodes << " needs --master HOST:PORT (node 0's address, reachable from every node)");
  const rpc::HostPort master =
      o.master.empty() ? rpc::HostPort{"127.0.0.1", free_loopback_port()} : rpc::parse_host_port(o.master);
  PW_INPUT_CHECK(master.port > 0, "--master " << o.master << ": give a port other than 0");
  std::vector<std::string> args = o.command;
  static const char* kSubcommands[] = {"train", "plan", "info", "launch"};
  const bool has_subcommand =
      std::any_of(std::begin(kSubcommands), std::end(kSubcommands), [&](const char* s) { return args.front() == s; });
  // Any other program: a path (or a name on PATH) that is not a flag, e.g. a user's training
  // program linked against the engine. It reads the same rank environment.
  std::string program;
  if (!has_subcommand && !args.front().empty() && args.front()[0] != '-') {
    program = args.front();
    args.erase(args.begin());
    PW_INPUT_CHECK(program.find('/') == std::string::npos || access(program.c_str(), X_OK) == 0,
                   "pipewright launch: '" << program << "' is not an executable file; give a program, or "
                                          "pipewright train arguments after --");
    PW_INPUT_CHECK(o.ps == 0, "--ps starts parameter servers for pipewright train jobs; start them with pipewright "
                              "ps serve for '" << program << "' and give it their addresses");
  } else if (!has_subcommand) {
    args.insert(args.begin(), "train");
  }
  PW_INPUT_CHECK(args.front() != "launch", "pipewright launch cannot launch itself; give train arguments after --");

  const int world = o.nnodes * o.nproc_per_node;
  std::fprintf(stderr, "pipewright launch: node %d of %d starts ranks %d-%d of %d; rendezvous %s%s\n", o.node_rank,
               o.nnodes, o.node_rank * o.nproc_per_node, (o.node_rank + 1) * o.nproc_per_node - 1, world,
               master.str().c_str(),
               o.max_restarts > 0 ? ("; at most " + count_of(o.max_restarts, "restart")).c_str() : "");
  std::signal(SIGINT, remember_signal);
  std::signal(SIGTERM, remember_signal);
  std::signal(SIGPIPE, SIG_IGN);
  // What a rank leaves behind when it ends becomes ours, so that it can be waited for (reap).
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  set_env(rpc::kJobTokenEnv, token);
  Launcher launcher(o, program, args, master);
  try {
    return launcher.run();
  } catch (const CoordinationError& e) {
    std::fprintf(stderr, "pipewright launch: job failed: %s\n", e.what());
    return 1;
  }
}

}  // namespace pw::tools
