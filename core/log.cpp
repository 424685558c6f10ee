#include "core/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <memory>
#include <mutex>

#include "core/error.h"

namespace pw::log {
namespace {
std::atomic<Level> g_level{Level::Info};
std::mutex g_mutex;   // guards g_sink and keeps messages whole
std::shared_ptr<const LogSink> g_sink;   // null: stderr

const char* name(Level l) {
  switch (l) {
    case Level::Debug: return "debug";
    case Level::Info: return "info";
    case Level::Warn: return "warn";
    case Level::Error: return "error";
  }
  return "?";
}

LogLevel public_level(Level l) {
  switch (l) {
    case Level::Debug: return LogLevel::Debug;
    case Level::Info: return LogLevel::Info;
    case Level::Warn: return LogLevel::Warn;
    case Level::Error: return LogLevel::Error;
  }
  return LogLevel::Error;
}

}  // namespace

void set_level(Level l) { g_level = l; }
Level level() { return g_level; }

void write(Level l, const std::string& message) {
  std::lock_guard lock(g_mutex);
  if (g_sink) (*g_sink)(public_level(l), message);
  else std::fprintf(stderr, "[pipewright %s] %s\n", name(l), message.c_str());
}

void output(const std::string& line) {
  std::lock_guard lock(g_mutex);
  if (g_sink) (*g_sink)(LogLevel::Output, line);
  else std::fprintf(stderr, "%s\n", line.c_str());
}

void outputf(const char* format, ...) {
  va_list args;
  va_start(args, format);
  va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(nullptr, 0, format, args);
  va_end(args);
  std::string line(n > 0 ? static_cast<std::size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(line.data(), line.size() + 1, format, again);
  va_end(again);
  output(line);
}

bool to_stderr() {
  std::lock_guard lock(g_mutex);
  return g_sink == nullptr;
}

}  // namespace pw::log

namespace pw {

void set_log_sink(LogSink sink) {
  std::lock_guard lock(log::g_mutex);
  log::g_sink = sink ? std::make_shared<const LogSink>(std::move(sink)) : nullptr;
}

void set_log_level(LogLevel level) {
  switch (level) {
    case LogLevel::Debug: log::set_level(log::Level::Debug); break;
    case LogLevel::Info: log::set_level(log::Level::Info); break;
    case LogLevel::Warn: log::set_level(log::Level::Warn); break;
    case LogLevel::Error:
    case LogLevel::Output: log::set_level(log::Level::Error); break;
  }
}

}  // namespace pw
