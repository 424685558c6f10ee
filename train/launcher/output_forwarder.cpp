#include "train/launcher/output_forwarder.h"

#include <unistd.h>

#include <cerrno>

namespace pw::launcher {

namespace {

void forward(int fd, std::FILE* out, const std::string& prefix, std::mutex& mutex) {
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
}

}  // namespace

OutputForwarder::OutputForwarder(int fd, std::FILE* out, std::string prefix, std::mutex& mutex)
    : thread_([fd, out, prefix = std::move(prefix), &mutex] { forward(fd, out, prefix, mutex); }) {}

OutputForwarder::~OutputForwarder() {
  if (thread_.joinable()) thread_.join();
}

}  // namespace pw::launcher
