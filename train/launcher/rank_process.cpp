#include "train/launcher/rank_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "train/launcher/output_forwarder.h"

extern char** environ;

namespace pw::launcher {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kGroupGone = std::chrono::seconds(5);   // for the processes a child left, after SIGKILL

// argv and envp, built before fork: the child only calls what is safe after fork in a threaded process.
struct ExecImage {
  std::string program;
  std::vector<std::string> strings;
  std::vector<char*> argv, envp;
};

ExecImage image_of(const ChildCommand& c) {
  ExecImage image;
  image.program = c.program;
  const std::size_t argc = c.args.size() + 1;
  image.strings.push_back(c.program.empty() ? "pipewright" : c.program);
  image.strings.insert(image.strings.end(), c.args.begin(), c.args.end());
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    const auto eq = entry.find('=');
    bool replaced = false;
    for (const auto& [name, value] : c.env) replaced = replaced || (eq == name.size() && entry.compare(0, eq, name) == 0);
    if (!replaced) image.strings.push_back(entry);
  }
  for (const auto& [name, value] : c.env) image.strings.push_back(name + "=" + value);
  for (std::size_t i = 0; i < image.strings.size(); ++i)
    (i < argc ? image.argv : image.envp).push_back(image.strings[i].data());
  image.argv.push_back(nullptr);
  image.envp.push_back(nullptr);
  return image;
}

[[noreturn]] void exec_child(const ExecImage& image, int out_fd, int err_fd, pid_t launcher) {
  // The child dies with its launcher, so a killed launcher leaves no rank behind.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != launcher) _exit(127);
  setpgid(0, 0);
  dup2(out_fd, STDOUT_FILENO);
  dup2(err_fd, STDERR_FILENO);
  // Nothing else of the launcher's (its connections to the other launchers): a rank, or what it
  // leaves running, must not keep them open after the launcher is gone.
  if (close_range(3, ~0U, 0) != 0)
    for (int fd = 3; fd < 4096; ++fd) close(fd);
  if (image.program.empty()) execve("/proc/self/exe", image.argv.data(), image.envp.data());
  else execvpe(image.program.c_str(), image.argv.data(), image.envp.data());
  const char* name = image.program.empty() ? "pipewright" : image.program.c_str();
  std::fprintf(stderr, "pipewright launch: cannot start the rank (%s): %s\n", name, std::strerror(errno));
  _exit(127);
}

}  // namespace

RankProcess::RankProcess(int index, const ChildCommand& command, const std::string& output_prefix,
                         std::mutex& output_mutex)
    : index_(index) {
  const ExecImage image = image_of(command);
  int out_pipe[2], err_pipe[2];
  PW_CHECK(pipe2(out_pipe, O_CLOEXEC) == 0, "pipe(): " << std::strerror(errno));
  if (pipe2(err_pipe, O_CLOEXEC) != 0) {
    const int err = errno;
    close(out_pipe[0]);
    close(out_pipe[1]);
    PW_CHECK(false, "pipe(): " << std::strerror(err));
  }
  const pid_t launcher = getpid();
  pid_ = fork();
  if (pid_ == 0) exec_child(image, out_pipe[1], err_pipe[1], launcher);
  close(out_pipe[1]);
  close(err_pipe[1]);
  if (pid_ < 0) {
    const int err = errno;
    close(out_pipe[0]);
    close(err_pipe[0]);
    PW_CHECK(false, "fork(): " << std::strerror(err));
  }
  setpgid(pid_, pid_);   // also in the child: whichever runs first
  forwarders_.push_back(std::make_unique<OutputForwarder>(out_pipe[0], stdout, output_prefix, output_mutex));
  forwarders_.push_back(std::make_unique<OutputForwarder>(err_pipe[0], stderr, output_prefix, output_mutex));
}

RankProcess::~RankProcess() {
  if (!status_) {
    kill(-pid_, SIGKILL);
    while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  forwarders_.clear();
}

bool RankProcess::reap() {
  if (status_) return true;
  siginfo_t info{};
  if (waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid != pid_)
    return false;
  kill(-pid_, SIGKILL);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  status_ = status;
  const auto gone_by = Clock::now() + kGroupGone;
  for (;;) {
    while (waitpid(-pid_, nullptr, WNOHANG) > 0) {
    }
    if (kill(-pid_, 0) != 0 || Clock::now() > gone_by) break;   // ESRCH: nobody is left in the group
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

void RankProcess::signal(int sig) const {
  if (!status_) kill(-pid_, sig);
}

bool RankProcess::poll_stopped() {
  siginfo_t info{};
  const bool stopped = !status_ &&
                       waitid(P_PID, static_cast<id_t>(pid_), &info, WSTOPPED | WNOHANG | WNOWAIT) == 0 &&
                       info.si_pid == pid_ && info.si_code == CLD_STOPPED;
  if (!stopped) stop_.reset();
  else if (!stop_) stop_ = Stop{info.si_status, Clock::now()};
  return stopped;
}

void RankProcess::terminate() {
  if (status_) return;
  ended_by_ = EndedBy::kLauncher;
  const bool stopped = poll_stopped();
  signal(SIGTERM);
  if (stopped) {
    if (!stopped_when_ended_) stopped_when_ended_ = stop_;
    signal(SIGCONT);   // else SIGTERM waits until someone continues it (SIGKILL 3 s later)
  }
}

void RankProcess::finish_output() { forwarders_.clear(); }

namespace {
std::string signal_words(int sig) {
  return "signal " + std::to_string(sig) + " (" + (sigabbrev_np(sig) ? std::string("SIG") + sigabbrev_np(sig) : "?") +
         ")";
}
}  // namespace

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) return "was killed by " + signal_words(WTERMSIG(status));
  return "exited with status " + std::to_string(WEXITSTATUS(status));
}

std::string describe_stop(int sig) { return "stopped by " + signal_words(sig); }

int exit_code_of(int status) { return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status); }

void check_program(const std::string& program) {
  if (program.empty()) return;
  const std::string accepted = "; give a program, or pipewright train arguments after --";
  if (program.find('/') != std::string::npos) {
    PW_INPUT_CHECK(access(program.c_str(), X_OK) == 0,
                   "pipewright launch: '" << program << "' is not an executable file" << accepted);
    return;
  }
  const char* path = std::getenv("PATH");
  const std::string dirs = path != nullptr ? path : "/bin:/usr/bin";
  for (std::size_t at = 0; at <= dirs.size();) {
    const auto colon = std::min(dirs.find(':', at), dirs.size());
    const std::string dir = dirs.substr(at, colon - at);
    if (access(((dir.empty() ? "." : dir) + "/" + program).c_str(), X_OK) == 0) return;
    at = colon + 1;
  }
  throw InputError("pipewright launch: '" + program + "' is neither an executable file nor a program on PATH" +
                   accepted);
}

}  // namespace pw::launcher
