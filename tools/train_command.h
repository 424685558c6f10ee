#pragma once
// `pipewright train`: its flags bind straight to the fields of a JobConfig (and of the FitOptions
// that say what the run writes); `--config FILE` starts from a config's JSON form, flags beside it
// override fields, and `--print-config` writes the config instead of training.
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "pipewright/fit.h"
#include "tools/flag_names.h"
#include "train/job_config.h"

namespace pw::tools {

struct TrainCommand {
  train::JobConfig job;
  train::FitOptions fit;
  bool print_config = false;
  FlagNames flags;   // filled as the flags are added
};

void add_train_command(CLI::App& app, TrainCommand& command);
int run_train(const TrainCommand& command);

// The job that `pipewright train ARGS` would run (ARGS starting with "train"), for the launcher;
// InputError naming what it cannot parse.
train::JobConfig job_config_of_train_args(const std::vector<std::string>& args);

}  // namespace pw::tools
