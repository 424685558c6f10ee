#pragma once
// `pipewright plan`: profiles a zoo model's layers on a device, splits it into pipeline stages
// (uniform, by parameters, by profile, or at given split points) and prints per-stage time and
// memory estimates with the simulated step time and bubble of the chosen schedule.
#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "pipewright/enums.h"

namespace pw::tools {

struct PlanOptions {
  std::string model = "resnet18";
  int width = 64;
  std::string dataset = "fashion-mnist";
  std::string synthetic_shape = "1x28x28";
  int stages = 1;
  bool stages_given = false;          // else: from --split, or 1
  int micro_batches = 1;
  bool micro_batches_given = false;   // else: P
  std::int64_t batch_size = 64;
  std::string schedule = "1f1b";
  int chunks = 0;   // 0: 2 for interleaved, else 1
  std::string device = "cpu:0";
  int threads = 0;  // 0: the device's default
  std::string device_memory;   // empty: no cap
  std::string partition = "profile";
  std::string split;           // "3,7,12": overrides --partition
  std::string recompute = "none";
  std::string optimizer = "adam";
  int replicas = 1;                            // with sharded optimizer state: how many share it
  dp::OptimizerState optimizer_state = dp::OptimizerState::Replicated;
  std::string link_bandwidth;  // bytes per second, e.g. "10GB"; default by device type
  int repeats = 3;
  std::uint64_t seed = 0;
  bool json = false;
  bool grid = false;   // also print the schedule's step x stage grid
  bool compare_schedules = false;   // also simulate every schedule kind on the same layout
};

void add_plan_command(CLI::App& app, PlanOptions& options);
int run_plan(const PlanOptions& options);

}  // namespace pw::tools
