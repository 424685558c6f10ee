#include "pipeline/schedule_file.h"

#include "core/input_file.h"
#include "core/durable_file.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "pipeline/program_check.h"
#include "pipeline/simulator.h"

namespace pw::pipeline {
namespace {

struct StageLine {
  int line_number;   // 1-based, in the source
  std::string text;
};

std::vector<StageLine> stage_lines(const std::string& text) {
  std::vector<StageLine> lines;
  std::istringstream in(text);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    lines.push_back({number, line});
  }
  return lines;
}

// from_text's message, which starts "schedule text: ", without that prefix.
std::string token_error(const InputError& e) {
  const std::string prefix = "schedule text: ";
  std::string msg = e.what();
  if (msg.starts_with(prefix)) msg.erase(0, prefix.size());
  return msg;
}

}  // namespace

std::vector<std::vector<Instruction>> parse_schedule_text(const std::string& text, const ScheduleSpec& spec,
                                                          const std::string& source) {
  try {
    validate(spec);
  } catch (const InputError& e) {
    throw InputError(source + ": " + e.what());
  }
  const auto lines = stage_lines(text);
  PW_INPUT_CHECK(static_cast<int>(lines.size()) == spec.stages,
                 source << ": " << lines.size() << " stage line(s) for a pipeline of " << spec.stages
                        << " stages; write one line per stage, in stage order (blank lines and lines starting "
                           "with '#' are ignored)");
  std::vector<std::vector<Instruction>> programs;
  for (int s = 0; s < spec.stages; ++s) {
    const StageLine& line = lines[static_cast<std::size_t>(s)];
    const std::string where = source + ":" + std::to_string(line.line_number) + ": ";
    try {
      programs.push_back(from_text(line.text));
    } catch (const InputError& e) {
      throw InputError(where + "stage " + std::to_string(s) + ": " + token_error(e));
    }
    try {
      check_stage_program(spec, s, programs.back());
    } catch (const InputError& e) {
      throw InputError(where + e.what());
    }
  }
  try {
    simulate(spec, programs, OpTimes::uniform(spec, 1.0, 1.0, 1.0));
  } catch (const ScheduleError& e) {
    const StageLine& line = lines.at(static_cast<std::size_t>(e.stage()));
    throw InputError(source + ":" + std::to_string(line.line_number) + ": " + e.detail());
  }
  return programs;
}

std::vector<std::vector<Instruction>> load_schedule_file(const std::string& path, const ScheduleSpec& spec) {
  // A plain file of at most 64 MiB, opened without blocking (core/input_file.h).
  return parse_schedule_text(read_whole(path, "schedule file", std::int64_t{64} << 20), spec, path);
}

std::string schedule_file_text(const ScheduleSpec& spec, const std::vector<std::vector<Instruction>>& programs) {
  PW_CHECK(static_cast<int>(programs.size()) == spec.stages,
           programs.size() << " programs for a pipeline of " << spec.stages << " stages");
  std::ostringstream out;
  out << "# pipewright schedule: " << spec.stages << " stages, " << spec.micro_batches << " micro-batches, "
      << spec.chunks << " chunk(s) per stage; one line per stage, in stage order\n";
  for (int s = 0; s < spec.stages; ++s) out << to_text(programs[static_cast<std::size_t>(s)], true) << '\n';
  return out.str();
}

void save_schedule_file(const std::string& path, const ScheduleSpec& spec,
                        const std::vector<std::vector<Instruction>>& programs) {
  const std::string text = schedule_file_text(spec, programs);
  try {
    write_file_durably(path, text);
  } catch (const InputError& e) {
    throw InputError(std::string("schedule file: ") + e.what());
  }
}

}  // namespace pw::pipeline
