#include "tools/prof/prof_command.h"

#include "core/durable_file.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "tools/flag_checks.h"
#include "tools/prof/analysis.h"
#include "tools/prof/hang_analysis.h"
#include "tools/prof/timeline_svg.h"

namespace pw::tools {

void add_prof_command(CLI::App& app, ProfOptions& o) {
  auto* cmd = app.add_subcommand("prof", "per-stage utilisation of a trace written by pipewright train --trace "
                                         "(several files of one multi-process run are merged)");
  cmd->add_option("files", o.files, "trace files");
  cmd->add_option("--hang", o.hang_dir,
                  "instead of traces: say where a stuck job was stuck from the flight records in this folder "
                  "(train --debug-dir: dumps, and the live records of ranks running or killed)")
      ->check([](const std::string& s) { return s.empty() ? std::string("--hang needs a folder") : std::string(); });
  cmd->add_option("--svg", o.svg_path, "draw the timeline of the last traced steps into this SVG file");
  cmd->add_option("--svg-steps", o.svg_steps, "how many steps the timeline shows")->capture_default_str()
      ->check(Positive);
  cmd->add_flag("--json", o.json, "print the report as JSON");
  cmd->callback([&o] { std::exit(run_prof(o)); });
}

int run_prof(const ProfOptions& o) {
  if (!o.hang_dir.empty()) {
    PW_INPUT_CHECK(o.files.empty() && o.svg_path.empty() && !o.json,
                   "prof --hang reads flight records only; give no trace files, --svg or --json with it");
    std::printf("%s", format_hang(diagnose_hang(read_flight_records(o.hang_dir))).c_str());
    return 0;
  }
  PW_INPUT_CHECK(!o.files.empty(), "prof: a trace file is required (train --trace writes them), or --hang DIR");
  const auto data = read_traces(o.files);
  const auto report = analyze(data);
  if (o.json) std::printf("%s\n", report_json(report).dump(2).c_str());
  else std::printf("%s", format_report(report).c_str());
  if (!o.svg_path.empty()) {
    const auto parent = std::filesystem::absolute(o.svg_path).parent_path();
    PW_INPUT_CHECK(std::filesystem::is_directory(parent), "--svg " << o.svg_path << ": folder " << parent.string()
                                                                   << " does not exist");
    const auto svg = timeline_svg(data, SvgOptions{o.svg_steps});
    try {
      write_file_durably(o.svg_path, svg);
    } catch (const InputError& e) {
      throw InputError(std::string("--svg: ") + e.what());
    }
    if (!o.json) std::printf("timeline: %s\n", o.svg_path.c_str());
  }
  return 0;
}

}  // namespace pw::tools
