#include "core/log.h"

#include <atomic>
#include <iostream>
#include <mutex>

#include "core/error.h"

namespace pw::log {
namespace {
std::atomic<Level> g_level{Level::Info};
std::mutex g_mutex;
const char* name(Level l) {
  switch (l) {
    case Level::Debug: return "debug";
    case Level::Info: return "info";
    case Level::Warn: return "warn";
    case Level::Error: return "error";
  }
  return "?";
}
}  // namespace

void set_level(Level l) { g_level = l; }
Level level() { return g_level; }
void write(Level l, const std::string& message) {
  std::lock_guard lock(g_mutex);
  std::cerr << "[pipewright " << name(l) << "] " << message << "\n";
}

}  // namespace pw::log
