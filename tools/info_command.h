#pragma once
#include <CLI/CLI.hpp>

namespace pw::tools {
// `pipewright info`: the build configuration and the versions of the libraries linked in.
void add_info_command(CLI::App& app);
}  // namespace pw::tools
