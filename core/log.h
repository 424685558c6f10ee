#pragma once
// Leveled logging through the program's sink (pipewright/log.h; default stderr); one mutex so
// lines from stage threads never interleave.
#include <sstream>
#include <string>

#include "pipewright/log.h"

namespace pw::log {

enum class Level { Debug = 0, Info = 1, Warn = 2, Error = 3 };

void set_level(Level level);
Level level();
void write(Level level, const std::string& message);

// A line the run reports to its user (LogLevel::Output): written bare to stderr by default.
void output(const std::string& line);
// output() of a printf-style line (no trailing newline).
[[gnu::format(printf, 1, 2)]] void outputf(const char* format, ...);
// Whether the default sink (stderr) is in use: progress may then rewrite its line in place.
bool to_stderr();

}  // namespace pw::log

#define PW_LOG(lvl, ...)                                                                   \
  do {                                                                                     \
    if (static_cast<int>(::pw::log::Level::lvl) >= static_cast<int>(::pw::log::level()))   \
      ::pw::log::write(::pw::log::Level::lvl, PW_DETAIL_MSG("" __VA_OPT__(<<) __VA_ARGS__));               \
  } while (0)
