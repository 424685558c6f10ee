#pragma once
// `pipewright prof FILE... [--svg OUT] [--json]`: the per-stage utilisation table of a trace;
// `pipewright prof --hang DIR`: where a stuck job was stuck, from its flight records.
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace pw::tools {

struct ProfOptions {
  std::vector<std::string> files;
  std::string svg_path;
  int svg_steps = 2;
  bool json = false;
  std::string hang_dir;   // --hang: read the flight records there instead of traces
};

void add_prof_command(CLI::App& app, ProfOptions& options);
int run_prof(const ProfOptions& options);

}  // namespace pw::tools
