// Every flag of every pipewright command, read from the command's own --help, given values it must
// refuse (a word for a number, a number below every range, one past a double, a fraction for a
// whole number) and an empty text: each run either accepts the value or answers in the one form
// of bad input — exactly one line "pipewright: error: ...", naming the flag, status 2, no bound of
// hundreds of digits — and none crashes or reports an internal error.
#include <future>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "tests/tools/cli_runner.h"

namespace {

using pw::test::CommandResult;
using pw::test::run_pipewright;

struct Flag {
  std::string name;   // --lr
  std::string type;   // FLOAT, INT, TEXT, ... or empty for a switch
};

std::vector<Flag> flags_of(const std::string& command) {
  const auto help = run_pipewright(command + " --help");
  BOOST_REQUIRE_MESSAGE(help.status == 0, command << " --help: " << help.output);
  // "  --lr FLOAT:POSITIVE   the learning rate": the type follows the name after one space.
  static const std::regex option(R"(^\s+(?:-\w,)?(--[a-z0-9-]+)(?: ([A-Z][A-Z0-9:]*))?)");
  std::vector<Flag> flags;
  std::istringstream lines(help.output);
  std::string line;
  while (std::getline(lines, line)) {
    std::smatch m;
    if (!std::regex_search(line, m, option)) continue;
    const std::string name = m[1];
    if (name == "--help" || name == "--config" || name == "--print-config") continue;
    flags.push_back({name, m[2]});
  }
  return flags;
}

struct Run {
  std::string args;
  std::string flag;
  CommandResult result;
};

// What is wrong with the answer to `run`, or empty.
std::string problem_of(const Run& run) {
  const auto& r = run.result;
  if (r.status == 0 || r.status == 124) return {};   // accepted (124: a server that started, stopped by timeout)
  std::vector<std::string> lines;
  std::istringstream in(r.output);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  if (r.status != 2) return "status " + std::to_string(r.status) + " (bad input is 2): " + r.output;
  if (lines.size() != 1) return std::to_string(lines.size()) + " lines (one expected): " + r.output;
  const auto& line = lines.front();
  if (line.rfind("pipewright: error: ", 0) != 0) return "not a 'pipewright: error:' line: " + line;
  if (line.size() > 400) return "a line of " + std::to_string(line.size()) + " characters: " + line.substr(0, 200);
  if (std::regex_search(line, std::regex("[0-9]{40,}"))) return "a number of 40 digits or more: " + line;
  if (line.find(run.flag) == std::string::npos && line.find("is required") == std::string::npos)
    return "does not name " + run.flag + ": " + line;
  return {};
}

}  // namespace

BOOST_AUTO_TEST_CASE(every_flag_of_every_command_refuses_bad_values_in_one_line) {
  // train: --print-config stops after parsing and checking, so an accepted value trains nothing;
  // a server started with an accepted value is stopped by `timeout` (status 124).
  const std::vector<std::pair<std::string, std::string>> commands = {
      {"train", " --print-config"}, {"plan", ""},      {"launch", ""},       {"prof", ""},
      {"ps serve", ""},             {"data pack", ""}, {"data inspect", ""}, {"top", ""},
  };
  const auto prefix = [](const std::string& command) {
    return command == "ps serve" ? std::string("env PW_JOB_TOKEN=flag-walk-token-0123456789 timeout 5 ") : std::string();
  };
  std::vector<Run> runs;
  for (const auto& [command, tail] : commands) {
    const auto flags = flags_of(command);
    BOOST_TEST_MESSAGE(command << ": " << flags.size() << " flags");
    BOOST_TEST(!flags.empty(), command);
    for (const auto& flag : flags) {
      std::vector<std::string> values;
      const bool number = flag.type.find("INT") != std::string::npos || flag.type.find("FLOAT") != std::string::npos;
      if (number) values = {"abc", "-1", "1e400"};
      if (flag.type.find("INT") != std::string::npos) values.push_back("2.5");
      if (!number && !flag.type.empty()) values = {"''"};
      for (const auto& v : values)
        runs.push_back({prefix(command) + pw::test::pipewright_binary() + " " + command + " " + flag.name + " " + v + tail,
                        flag.name, {}});
    }
  }
  // Two at a time: a run is mostly the process starting.
  const std::size_t half = runs.size() / 2;
  auto other = std::async(std::launch::async, [&] {
    for (std::size_t i = half; i < runs.size(); ++i) runs[i].result = pw::test::run_command(runs[i].args);
  });
  for (std::size_t i = 0; i < half; ++i) runs[i].result = pw::test::run_command(runs[i].args);
  other.get();
  std::size_t refused = 0;
  for (const auto& run : runs) {
    refused += run.result.status != 0 ? 1 : 0;
    const auto problem = problem_of(run);
    BOOST_TEST(problem.empty(), run.args << ": " << problem);
  }
  BOOST_TEST_MESSAGE(runs.size() << " runs, " << refused << " refused");
  BOOST_TEST(refused > runs.size() / 2);   // the values are chosen to be refused; most must be
}
