#pragma once
// Copies a child's output (one end of a pipe) to ours line by line with a prefix ("[rank 3] "),
// on a thread of its own, until the pipe closes: when the child and everything it started ended.
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

namespace pw::launcher {

class OutputForwarder {
 public:
  // Takes `fd` (closed when the pipe runs dry). Lines of every forwarder sharing `mutex` never mix.
  OutputForwarder(int fd, std::FILE* out, std::string prefix, std::mutex& mutex);
  ~OutputForwarder();   // waits for the pipe to close
  OutputForwarder(const OutputForwarder&) = delete;
  OutputForwarder& operator=(const OutputForwarder&) = delete;

 private:
  std::thread thread_;
};

}  // namespace pw::launcher
