#pragma once
// A shell command run in the background with its output in a file: for tests that must act on a
// running job (kill one of its ranks) and time how long the rest take to stop.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace pw::test {

class BackgroundCommand {
 public:
  BackgroundCommand(const std::string& command, std::string log) : log_(std::move(log)) {
    pid_ = fork();
    if (pid_ == 0) {
      const std::string line = "exec " + command + " > " + log_ + " 2>&1";
      execl("/bin/sh", "sh", "-c", line.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  ~BackgroundCommand() {
    if (!status_ && pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  BackgroundCommand(const BackgroundCommand&) = delete;
  BackgroundCommand& operator=(const BackgroundCommand&) = delete;

  pid_t pid() const { return pid_; }
  std::string output() const {
    std::ifstream in(log_);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  // Waits until the output contains `text` `times` times; false at the timeout or if the command
  // ended first.
  bool wait_for_output(const std::string& text, std::chrono::seconds timeout, int times = 1) {
    const auto found = [&] {
      const auto out = output();
      int n = 0;
      for (auto at = out.find(text); at != std::string::npos; at = out.find(text, at + 1)) ++n;
      return n >= times;
    };
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      if (found()) return true;
      if (poll()) return found();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  // The exit status (as a shell reports it) once ended, waiting at most `timeout`.
  std::optional<int> wait(std::chrono::milliseconds timeout) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (!poll() && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return status_;
  }
  // The command's child processes (the ranks a launcher started), oldest first.
  std::vector<pid_t> children() const {
    std::vector<pid_t> out;
    std::ifstream in("/proc/" + std::to_string(pid_) + "/task/" + std::to_string(pid_) + "/children");
    for (pid_t p; in >> p;) out.push_back(p);
    return out;
  }

 private:
  bool poll() {
    if (status_) return true;
    int raw = 0;
    if (waitpid(pid_, &raw, WNOHANG) != pid_) return false;
    status_ = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
    return true;
  }

  std::string log_;
  pid_t pid_ = -1;
  std::optional<int> status_;
};

// A launched rank's RANK, read from its environment (-1 when unreadable).
inline int rank_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  std::string entry;
  while (std::getline(in, entry, '\0'))
    if (entry.rfind("RANK=", 0) == 0) return std::stoi(entry.substr(5));
  return -1;
}

// False once the process is gone (a zombie left to an init that does not reap counts as gone).
inline bool process_exists(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string pid_text, name, state;
  if (!(stat >> pid_text >> name >> state)) return false;
  return state != "Z";
}

}  // namespace pw::test
