// The pipewright command: train, plan, launch, prof, top, ps, data and info. Exit statuses: 0 done, 1 out
// of memory, 2 bad input, 3 internal error, 4 timeout, 5 stopped because another rank failed,
// 6 the job ran but did not train (docs/long_jobs.md).
#include <cstdio>
#include <cstdlib>
#include <string>

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
    std::string message = e.what();
    for (auto& c : message)
      if (c == '\n') c = ' ';
    std::string command = "pipewright";
    for (const CLI::App* sub = &app; sub != nullptr;) {
      const auto parsed = sub->get_subcommands();
      sub = parsed.empty() ? nullptr : parsed.front();
      if (sub != nullptr) command += " " + sub->get_name();
    }
    std::fprintf(stderr, "pipewright: error: %s (%s --help lists what is accepted)\n", message.c_str(), command.c_str());
    return 2;
  } catch (const pw::rpc::AbortedError& e) {
    // Another rank of the job failed; the message names it and what this rank was doing.
    std::fprintf(stderr, "pipewright: stopped: %s\n", e.what());
    return 5;
  } catch (const pw::rpc::TimeoutError& e) {
    std::fprintf(stderr, "pipewright: timeout: %s\n", e.what());
    return 4;
  } catch (const pw::kernels::OutOfMemory& e) {
    std::fprintf(stderr, "pipewright: error: %s\n", e.what());
    return 1;
  } catch (const pw::InputError& e) {
    std::fprintf(stderr, "pipewright: error: %s\n", e.what());
    return 2;
  } catch (const pw::TrainingFailed& e) {
    // The job ran but did not train (diverged, gave up after its rollbacks, skipped every step).
    std::fprintf(stderr, "pipewright: did not train: %s\n", e.what());
    return 6;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pipewright: internal error: %s\n", e.what());
    return 3;
  }
  return 0;
}
