// The pipewright command: train, plan, launch, prof, top, ps, data and info. Exit statuses: 0 done, 1 out
// of memory, 2 bad input, 3 internal error, 4 timeout, 5 stopped because another rank failed,
// 6 the job ran but did not train (docs/long_jobs.md).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include "core/error.h"
#include "kernels/allocator.h"
#include "rpc/transport.h"
#include "tools/data_command.h"
#include "tools/fault_env.h"
#include "tools/info_command.h"
#include "tools/top_command.h"
#include "tools/launch_command.h"
#include "tools/prof/prof_command.h"
#include "tools/ps_command.h"
#include "tools/plan_command.h"
#include "tools/train_command.h"

namespace {

// A message as one printable line: control characters (bytes below 0x20, and 0x7f) escaped as
// \n, \t, \r or \xNN, so that a newline or a terminal escape sequence in a flag, a file or a
// name cannot break the line or drive the terminal; and a message past kMostBytes (a huge name
// in a config) cut in the middle, keeping its start and its end (what is accepted).
std::string printable(std::string_view message) {
  constexpr std::size_t kMostBytes = 2000, kTail = 400;
  std::string out;
  out.reserve(std::min(message.size(), kMostBytes) + 64);
  const auto escape = [&out](std::string_view part) {
    static const char* const hex = "0123456789abcdef";
    for (const char ch : part) {
      const auto c = static_cast<unsigned char>(ch);
      if (c == '\n') out += "\\n";
      else if (c == '\t') out += "\\t";
      else if (c == '\r') out += "\\r";
      else if (c < 0x20 || c == 0x7f) {
        out += "\\x";
        out += hex[c >> 4];
        out += hex[c & 0xf];
      } else {
        out += ch;
      }
    }
  };
  if (message.size() <= kMostBytes) {
    escape(message);
    return out;
  }
  // Cut at character boundaries (not inside a UTF-8 sequence).
  const auto continuation = [&](std::size_t i) { return (static_cast<unsigned char>(message[i]) & 0xc0) == 0x80; };
  std::size_t head = kMostBytes - kTail, tail = message.size() - kTail;
  while (head > 0 && continuation(head)) --head;
  while (tail < message.size() && continuation(tail)) ++tail;
  escape(message.substr(0, head));
  out += "\u2026 (" + std::to_string(tail - head) + " more bytes) \u2026";
  escape(message.substr(tail));
  return out;
}

// "pipewright: <kind>: <message>" on stderr, as one printable line.
void say(const char* kind, std::string_view message) {
  std::fprintf(stderr, "pipewright: %s: %s\n", kind, printable(message).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pipewright: pipeline-parallel training of models too large for one device"};
  app.require_subcommand(1);
  pw::tools::TrainCommand train;
  pw::tools::add_train_command(app, train);
  pw::tools::add_info_command(app);
  pw::tools::add_top_command(app);
  pw::tools::PlanCommand plan;
  pw::tools::add_plan_command(app, plan);
  pw::tools::LaunchOptions launch;
  pw::tools::add_launch_command(app, launch);
  pw::tools::ProfOptions prof;
  pw::tools::add_prof_command(app, prof);
  pw::tools::PsServeOptions ps;
  pw::tools::add_ps_command(app, ps);
  pw::tools::DataOptions data;
  pw::tools::add_data_command(app, data);
  try {
    pw::tools::install_fault_hooks_from_environment();   // tests only: PW_INJECT_FAULT, PW_INJECT_STEP_DELAY
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);   // --help: the text, status 0
    // A bad flag is bad input like any other: one line, status 2, and where to look.
    std::string command = "pipewright";
    for (const CLI::App* sub = &app; sub != nullptr;) {
      const auto parsed = sub->get_subcommands();
      sub = parsed.empty() ? nullptr : parsed.front();
      if (sub != nullptr) command += " " + sub->get_name();
    }
    say("error", std::string(e.what()) + " (" + command + " --help lists what is accepted)");
    return 2;
  } catch (const pw::rpc::AbortedError& e) {
    // Another rank of the job failed; the message names it and what this rank was doing.
    say("stopped", e.what());
    return 5;
  } catch (const pw::rpc::TimeoutError& e) {
    say("timeout", e.what());
    return 4;
  } catch (const pw::kernels::OutOfMemory& e) {
    say("error", e.what());
    return 1;
  } catch (const pw::InputError& e) {
    say("error", e.what());
    return 2;
  } catch (const pw::TrainingFailed& e) {
    // The job ran but did not train (diverged, gave up after its rollbacks, skipped every step).
    say("did not train", e.what());
    return 6;
  } catch (const std::bad_alloc& e) {
    // The host refused memory (an allocation the checks before could not foresee): out of memory,
    // as a device's OutOfMemory is, not a bug.
    say("out of memory", std::string("the host could not allocate the memory the job asked for (") + e.what() +
                             "); give it more memory, or run it smaller (--batch-size, --micro-batches, "
                             "--synthetic-size, the model)");
    return 1;
  } catch (const std::exception& e) {
    say("internal error", e.what());
    return 3;
  }
  return 0;
}
