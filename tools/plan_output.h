#pragma once
// What `pipewright plan` prints for one job: its split, per-stage time, memory by kind and the
// simulated step, as text or as one JSON object.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/allocator.h"
#include "kernels/device.h"
#include "partition/profiler.h"
#include "pipeline/schedule_comparison.h"
#include "train/job_plan.h"
#include "train/layout_prediction.h"

namespace pw::tools {

struct PlanReport {
  train::JobPlan job;
  kernels::Device device;   // where the layers were profiled
  int threads = 0;
  train::LinkSpeeds links;
  std::string method;       // "profile", "params", "uniform" or "split 3,7,12"
  std::vector<partition::LayerProfile> profiles;
  std::int64_t parameters = 0;
  train::LayoutPrediction prediction;
  std::vector<pipeline::ScheduleComparison> comparison;   // --compare-schedules
};

void print_plan(const PlanReport& report);
void print_comparison(const PlanReport& report);
nlohmann::json plan_json(const PlanReport& report);

// {"parameters": bytes, ..., "workspace": bytes}, the summary's `memory.by_kind` form.
nlohmann::json by_kind_json(const kernels::BytesByKind& bytes);
// "params 1.2 MiB, grads 1.2 MiB, ..." leaving out kinds of 0 bytes.
std::string by_kind_text(const kernels::BytesByKind& bytes);
std::string seconds_text(double seconds);

}  // namespace pw::tools
