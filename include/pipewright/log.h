#pragma once
// Where pipewright's messages go: progress lines, results, warnings and errors of a run. By default
// they are written to stderr (progress rewritten in place on a terminal); a program may send them
// elsewhere (its own logger, a GUI, a file) by setting a sink. The setting is process-wide and
// may be changed at any time; the sink is called from the library's threads one message at a time.
#include <functional>
#include <string_view>

namespace pw {

enum class LogLevel {
  Debug,
  Info,
  Warn,
  Error,
  Output,   // what a run reports to its user: progress lines, results ("test accuracy 0.91 ..."), notices
};

using LogSink = std::function<void(LogLevel level, std::string_view message)>;

// Messages go to `sink` from now on; an empty sink restores the default (stderr).
void set_log_sink(LogSink sink);
// Debug, Info, Warn and Error messages below `level` are dropped (default Info); Output always goes.
void set_log_level(LogLevel level);

}  // namespace pw
