#pragma once
// One process a launcher started (a rank or a parameter server), in a process group of its own
// (its pid), so that stopping it also stops whatever it started. Its stdout and stderr reach ours
// line by line with a prefix. It dies with the launcher (PR_SET_PDEATHSIG), and it keeps none of
// the launcher's other file descriptors (as torchrun's close_fds).
#include <sys/types.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace pw::launcher {

class OutputForwarder;

struct ChildCommand {
  std::string program;              // a path or a name on PATH; empty: this executable, as "pipewright"
  std::vector<std::string> args;    // after argv[0]
  std::vector<std::pair<std::string, std::string>> env;   // set over this process's environment
};

// Who ended a child: itself (its status is a cause), or the launcher stopping it.
enum class EndedBy { kItself, kLauncher };

// A child stopped by a signal (SIGSTOP, SIGTSTP, ...): it runs no more, so sends no heartbeat, and
// cannot stop by itself either.
struct Stop {
  int signal = 0;
  std::chrono::steady_clock::time_point since;   // when the launcher first saw it stopped
};

class RankProcess {
 public:
  // Starts `command`; `index` is the rank or the server's shard. Throws Error when fork or pipe fail
  // (a program that cannot be executed exits 127 with one line on its stderr).
  RankProcess(int index, const ChildCommand& command, const std::string& output_prefix, std::mutex& output_mutex);
  // Kills the group and waits for it when it is still running; never throws.
  ~RankProcess();
  RankProcess(const RankProcess&) = delete;
  RankProcess& operator=(const RankProcess&) = delete;

  int index() const { return index_; }
  pid_t pid() const { return pid_; }
  // True once the process ended (does not wait). What it left running in its group is killed and
  // waited for before it is reaped (while its pid, a zombie, still names the group; the launcher
  // is the subreaper), so nothing of it outlives it.
  bool reap();
  const std::optional<int>& status() const { return status_; }   // the wait status once reaped
  // `sig` to the whole group while the process was not reaped.
  void signal(int sig) const;
  // Whether the process is stopped now (asked without reaping it: waitid WSTOPPED|WNOWAIT); stop()
  // is then since when and by which signal, and empty again once it runs on.
  bool poll_stopped();
  const std::optional<Stop>& stop() const { return stop_; }
  // SIGTERM to the group, remembering that the launcher stopped it; a stopped process also gets
  // SIGCONT, so that it ends at once (stopped_when_ended() then says how it was stopped).
  void terminate();
  EndedBy ended_by() const { return ended_by_; }
  const std::optional<Stop>& stopped_when_ended() const { return stopped_when_ended_; }
  // Waits until its output reached ours (the pipes close with the group); call after reap().
  void finish_output();

 private:
  int index_;
  pid_t pid_ = -1;
  std::optional<int> status_;
  EndedBy ended_by_ = EndedBy::kItself;
  std::optional<Stop> stop_, stopped_when_ended_;
  std::vector<std::unique_ptr<OutputForwarder>> forwarders_;
};

// Wait statuses in words: "exited with status 3", "was killed by signal 9 (SIGKILL)".
std::string describe_status(int status);
// A stop in words: "stopped by signal 19 (SIGSTOP)".
std::string describe_stop(int sig);
// The status a launcher ends with for it: the exit status, or 128 + the signal.
int exit_code_of(int status);

// Whether `program` can be started: a path to an executable file, or a name found on PATH
// (InputError, one line, otherwise). Empty: this executable, always.
void check_program(const std::string& program);

}  // namespace pw::launcher
