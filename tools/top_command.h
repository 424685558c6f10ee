#pragma once
#include <CLI/CLI.hpp>

namespace pw::tools {
// `pipewright top HOST:PORT`: a running job's metrics endpoint (train --metrics-port) as a live
// terminal table, redrawn every --interval seconds; --once prints one table and exits.
void add_top_command(CLI::App& app);
}  // namespace pw::tools
