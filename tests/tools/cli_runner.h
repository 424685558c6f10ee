#pragma once
// Runs the built `pipewright` binary and captures its exit status and output.
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace pw::test {

struct CommandResult {
  int status = -1;
  std::string output;   // stdout and stderr together
};

inline std::string pipewright_binary() {
  const char* d = std::getenv("PW_BIN_DIR");
  return std::string(d != nullptr ? d : "build/bin") + "/pipewright";
}

// Runs a shell command line, stdout and stderr together.
inline CommandResult run_command(const std::string& command) {
  CommandResult r;
  const std::string cmd = command + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), buf.size(), pipe) != nullptr) r.output += buf.data();
  const int raw = pclose(pipe);
  r.status = WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  return r;
}

inline CommandResult run_pipewright(const std::string& args) { return run_command(pipewright_binary() + " " + args); }

struct ScratchDir {
  std::filesystem::path path;
  explicit ScratchDir(const std::string& tag)
      : path(std::filesystem::temp_directory_path() / ("pw_" + tag + "_" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() { std::filesystem::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

}  // namespace pw::test
