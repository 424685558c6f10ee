#pragma once
// Minimal leveled logging to stderr; one mutex so lines from stage threads never interleave.
#include <sstream>
#include <string>

namespace pw::log {

enum class Level { Debug = 0, Info = 1, Warn = 2, Error = 3 };

void set_level(Level level);
Level level();
void write(Level level, const std::string& message);

}  // namespace pw::log

#define PW_LOG(lvl, ...)                                                                   \
  do {                                                                                     \
    if (static_cast<int>(::pw::log::Level::lvl) >= static_cast<int>(::pw::log::level()))   \
      ::pw::log::write(::pw::log::Level::lvl, PW_DETAIL_MSG("" __VA_OPT__(<<) __VA_ARGS__));               \
  } while (0)
