#include "train/launcher/stop_signals.h"

#include <atomic>
#include <csignal>
#include <cstring>

namespace pw::launcher {

namespace {
std::atomic<int> g_signal{0};
extern "C" void remember_signal(int sig) { g_signal.store(sig); }
}  // namespace

void install_stop_signal_handlers() {
  std::signal(SIGINT, remember_signal);
  std::signal(SIGTERM, remember_signal);
}

int take_stop_signal() { return g_signal.exchange(0); }

std::string signal_name(int sig) {
  return sigabbrev_np(sig) ? std::string("SIG") + sigabbrev_np(sig) : "signal " + std::to_string(sig);
}

}  // namespace pw::launcher
