#pragma once
// `pipewright plan`: the flags fill a JobConfig as `pipewright train`'s do (the same fields, the
// same --config), the job is planned as train plans it (train::plan_job), its layers profiled on a
// device, and the split, per-stage time and memory by kind, and the simulated step time are
// printed. With --search it ranks the layouts that fit the devices instead (plan_search.h).
#include <string>

#include <CLI/CLI.hpp>

#include "tools/flag_names.h"
#include "train/job_config.h"

namespace pw::tools {

struct PlanCommand {
  train::JobConfig job;
  FlagNames flags;                 // filled as the flags are added
  std::string link_bandwidth;      // bytes per second between stages, e.g. "10GB"; default by device type
  int repeats = 3;
  bool json = false;
  bool grid = false;               // also print the schedule's step x stage grid
  bool compare_schedules = false;  // also simulate every schedule kind on the same layout
  // --search
  bool search = false;
  int devices = 0;                 // devices the layouts may use
  int nodes = 1;
  int top = 5;
  std::string write_config;        // the best layout's JobConfig JSON goes here
  std::string layout_flag_given;   // a flag --search chooses itself, when one was given
  bool schedule_given = false, recompute_given = false;
};

void add_plan_command(CLI::App& app, PlanCommand& command);
int run_plan(const PlanCommand& command);

}  // namespace pw::tools
