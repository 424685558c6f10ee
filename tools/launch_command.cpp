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
#include <mutex>
#include <optional>
#include <thread>

#include "core/error.h"
#include "rpc/host_port.h"
#include "rpc/job_token.h"
#include "rpc/launch_env.h"
#include "train/parameter_servers.h"
#include "tools/train_command.h"

namespace pw::tools {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kPoll = std::chrono::milliseconds(50);
constexpr auto kTermToKill = std::chrono::seconds(3);

std::atomic<int> g_signal{0};
extern "C" void remember_signal(int sig) { g_signal.store(sig); }

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

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  std::optional<int> status;   // set once reaped
  bool signalled = false;      // the launcher stopped it: its status is no cause
};

void set_env(const char* name, const std::string& value) { setenv(name, value.c_str(), 1); }

// In the child: exports the rank's environment and runs `program` (empty: this executable, as
// `pipewright <args>`) with `args`.
[[noreturn]] void exec_rank(const std::string& program, const std::vector<std::string>& args, int out_fd, int err_fd,
                            pid_t launcher) {
  // The rank dies with its launcher, so a killed launcher leaves no rank behind.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != launcher) _exit(127);
  dup2(out_fd, STDOUT_FILENO);
  dup2(err_fd, STDERR_FILENO);
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

// The train flags the servers must agree with (replicas = workers, update mode), read with the
// train command's own parser.
TrainOptions train_options_of(const std::vector<std::string>& args) {
  PW_INPUT_CHECK(args.front() == "train", "pipewright launch --ps serves the embedding tables of a train job; got '"
                                              << args.front() << "' after --");
  CLI::App app;
  TrainOptions t;
  add_train_command(app, t);
  app.get_subcommand("train")->callback([] {});
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError& e) {
    throw InputError(std::string("the train arguments after --: ") + e.what());
  }
  return t;
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

}  // namespace

void add_launch_command(CLI::App& app, LaunchOptions& o) {
  auto* cmd = app.add_subcommand("launch", "start this node's ranks of a multi-process job: pipewright launch "
                                           "--nproc-per-node N [--nnodes K --node-rank I --master HOST:PORT] -- "
                                           "<train arguments>");
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
  std::fprintf(stderr, "pipewright launch: node %d of %d starts ranks %d-%d of %d; rendezvous %s\n", o.node_rank,
               o.nnodes, o.node_rank * o.nproc_per_node, (o.node_rank + 1) * o.nproc_per_node - 1, world,
               master.str().c_str());
  std::signal(SIGINT, remember_signal);
  std::signal(SIGTERM, remember_signal);
  std::signal(SIGPIPE, SIG_IGN);

  std::mutex output_mutex;
  std::vector<Rank> ranks, servers;   // servers: the parameter servers (Rank::rank = shard)
  std::vector<std::unique_ptr<OutputForwarder>> forwarders;
  const pid_t self = getpid();
  // Should starting one process fail, the ones already started are stopped before the error goes up.
  struct StopStarted {
    std::vector<Rank>& ranks;
    std::vector<Rank>& servers;
    int pending = std::uncaught_exceptions();
    ~StopStarted() {
      if (std::uncaught_exceptions() <= pending) return;
      for (auto* group : {&ranks, &servers}) {
        for (auto& r : *group) kill(r.pid, SIGKILL);
        for (auto& r : *group) waitpid(r.pid, nullptr, 0);
      }
    }
  } stop_started{ranks, servers};
  const auto spawn = [&](const std::string& child_program, const std::vector<std::string>& child_args,
                         const std::string& prefix) {
    int out_pipe[2], err_pipe[2];
    PW_CHECK(pipe2(out_pipe, O_CLOEXEC) == 0 && pipe2(err_pipe, O_CLOEXEC) == 0, "pipe(): " << std::strerror(errno));
    const pid_t pid = fork();
    PW_CHECK(pid >= 0, "fork(): " << std::strerror(errno));
    if (pid == 0) exec_rank(child_program, child_args, out_pipe[1], err_pipe[1], self);
    close(out_pipe[1]);
    close(err_pipe[1]);
    forwarders.push_back(std::make_unique<OutputForwarder>(out_pipe[0], stdout, prefix, output_mutex));
    forwarders.push_back(std::make_unique<OutputForwarder>(err_pipe[0], stderr, prefix, output_mutex));
    return pid;
  };
  set_env(rpc::kJobTokenEnv, token);

  if (o.ps > 0) {
    PW_INPUT_CHECK(o.nnodes == 1, "--ps starts the parameter servers of a single-node job; for " << o.nnodes
                                  << " nodes start them with pipewright ps serve and give train --ps-servers");
    const TrainOptions train = train_options_of(args);
    const train::JobConfig job = job_config_of(train);
    std::string addresses;
    std::vector<int> ports;
    for (int shard = 0; shard < o.ps; ++shard) {
      // The same servers `train --ps` runs as threads (a bad --ps-mode fails here, before anything starts).
      const dp::PsShardConfig c = train::ps_shard_config(job, shard, o.ps);
      const int port = free_loopback_port();
      std::vector<std::string> serve = {"ps", "serve", "--bind", "127.0.0.1:" + std::to_string(port), "--shard",
                                        std::to_string(c.shard), "--shards", std::to_string(c.shards), "--workers",
                                        std::to_string(c.workers), "--mode", dp::update_mode_name(c.mode)};
      if (!o.ps_dir.empty()) {
        serve.push_back("--dir");
        serve.push_back(o.ps_dir + "/shard" + std::to_string(shard));
      }
      servers.push_back(Rank{shard, spawn("", serve, "[ps " + std::to_string(shard) + "] "), std::nullopt});
      ports.push_back(port);
      addresses += (addresses.empty() ? "" : ",") + ("127.0.0.1:" + std::to_string(port));
    }
    // The ranks' first pull must find every server listening.
    const auto ready_by = Clock::now() + std::chrono::seconds(30);
    for (int shard = 0; shard < o.ps; ++shard) {
      auto& server = servers[static_cast<std::size_t>(shard)];
      while (!accepts(ports[static_cast<std::size_t>(shard)])) {
        int status = 0;
        if (waitpid(server.pid, &status, WNOHANG) == server.pid) {
          server.status = status;
          throw InputError("parameter server " + std::to_string(shard) + " " + describe_status(status) +
                           " before it listened (see its output above)");
        }
        PW_INPUT_CHECK(Clock::now() < ready_by, "parameter server " << shard << " did not listen on 127.0.0.1:"
                                                                    << ports[static_cast<std::size_t>(shard)]
                                                                    << " within 30 s");
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
    set_env(train::kPsServersEnv, addresses);
    std::fprintf(stderr, "pipewright launch: %d parameter servers (%s, %d workers) at %s\n", o.ps,
                 train.ps_mode.c_str(), train.replicas, addresses.c_str());
  }

  for (int local = 0; local < o.nproc_per_node; ++local) {
    const int rank = o.node_rank * o.nproc_per_node + local;
    set_env("RANK", std::to_string(rank));
    set_env("WORLD_SIZE", std::to_string(world));
    set_env("LOCAL_RANK", std::to_string(local));
    set_env("LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node));
    set_env("GROUP_RANK", std::to_string(o.node_rank));
    set_env("MASTER_ADDR", master.host);
    set_env("MASTER_PORT", std::to_string(master.port));
    ranks.push_back(Rank{rank, spawn(program, args, "[rank " + std::to_string(rank) + "] "), std::nullopt});
  }

  const auto say = [&](const std::string& line) {
    std::lock_guard lock(output_mutex);
    std::fprintf(stderr, "pipewright launch: %s\n", line.c_str());
    std::fflush(stderr);
  };
  std::optional<Rank> first_failure;
  std::optional<Clock::time_point> stop_by, kill_by;
  std::size_t running = ranks.size();
  while (running > 0) {
    for (auto& r : ranks) {
      if (r.status) continue;
      int status = 0;
      const pid_t done = waitpid(r.pid, &status, WNOHANG);
      if (done != r.pid) continue;
      r.status = status;
      --running;
      if (status != 0) {
        say("rank " + std::to_string(r.rank) + " (pid " + std::to_string(r.pid) + ") " + describe_status(status));
        // The root cause: the first rank that failed by itself (killed, crashed, bad input),
        // else the first that stopped.
        if (r.signalled) continue;
        if (first_failure && first_failure->rank >= 0 && is_echo(*first_failure->status) && !is_echo(status))
          first_failure = r;
        if (!first_failure) {
          first_failure = r;
          stop_by = Clock::now() + std::chrono::milliseconds(static_cast<std::int64_t>(o.grace_seconds * 1000));
          if (running > 0)
            say("stopping the job: the other ranks get " + std::to_string(static_cast<int>(o.grace_seconds)) +
                " s to stop by themselves");
        }
      }
    }
    for (auto& server : servers) {
      if (server.status) continue;
      int status = 0;
      if (waitpid(server.pid, &status, WNOHANG) != server.pid) continue;
      server.status = status;
      say("parameter server " + std::to_string(server.rank) + " (pid " + std::to_string(server.pid) + ") " +
          describe_status(status) + " while the ranks ran");
      if (!first_failure) {
        // Its shard's rows are gone: the ranks fail on their next pull; give them the grace to say so.
        first_failure = Rank{-2, server.pid, status};
        stop_by = Clock::now() + std::chrono::milliseconds(static_cast<std::int64_t>(o.grace_seconds * 1000));
      }
    }
    if (const int sig = g_signal.exchange(0); sig != 0) {
      say(std::string("got SIG") + sigabbrev_np(sig) + "; stopping every rank");
      for (auto& r : ranks)
        if (!r.status) {
          r.signalled = true;
          kill(r.pid, SIGTERM);
        }
      if (!kill_by) kill_by = Clock::now() + kTermToKill;
      if (!first_failure) first_failure = Rank{-1, -1, 128 + sig};
    }
    if (stop_by && Clock::now() > *stop_by && !kill_by) {
      for (auto& r : ranks)
        if (!r.status) {
          say("rank " + std::to_string(r.rank) + " did not stop; terminating it");
          r.signalled = true;
          kill(r.pid, SIGTERM);
        }
      kill_by = Clock::now() + kTermToKill;
    }
    if (kill_by && Clock::now() > *kill_by) {
      for (auto& r : ranks)
        if (!r.status) kill(r.pid, SIGKILL);
    }
    if (running > 0) std::this_thread::sleep_for(kPoll);
  }
  // The servers write their last snapshot on SIGTERM; SIGKILL after kTermToKill.
  for (auto& server : servers)
    if (!server.status) kill(server.pid, SIGTERM);
  const auto servers_by = Clock::now() + kTermToKill;
  for (auto& server : servers) {
    while (!server.status) {
      int status = 0;
      if (waitpid(server.pid, &status, WNOHANG) == server.pid) server.status = status;
      else if (Clock::now() > servers_by) {
        kill(server.pid, SIGKILL);
        waitpid(server.pid, &status, 0);
        server.status = status;
      } else {
        std::this_thread::sleep_for(kPoll);
      }
    }
  }
  forwarders.clear();   // the pipes close with the ranks and servers
  if (!first_failure) {
    say("all " + std::to_string(ranks.size()) + " ranks finished");
    return 0;
  }
  if (first_failure->rank == -2) {
    say("job failed: a parameter server " + describe_status(*first_failure->status));
    return 1;
  }
  if (first_failure->rank < 0) return *first_failure->status;
  say("job failed: rank " + std::to_string(first_failure->rank) + " " + describe_status(*first_failure->status));
  const int code = exit_code_of(*first_failure->status);
  return code == 0 ? 1 : code;
}

}  // namespace pw::tools
