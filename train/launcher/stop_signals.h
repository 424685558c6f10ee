#pragma once
// SIGINT and SIGTERM for a launcher: remembered instead of fatal, so that the supervisor stops its
// ranks and servers first (the default of SupervisorHooks::take_stop_request reads them). The
// handlers are process-wide; the program that wants them (pipewright launch) installs them once.
#include <string>

namespace pw::launcher {

void install_stop_signal_handlers();
// The last SIGINT/SIGTERM not yet taken, and forgets it; 0 when there is none.
int take_stop_signal();

// "SIGTERM", or "signal 77" for one without a name.
std::string signal_name(int sig);

}  // namespace pw::launcher
