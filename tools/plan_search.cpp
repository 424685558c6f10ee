#include "tools/plan_search.h"

#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/durable_file.h"
#include "core/error.h"
#include "core/units.h"
#include "kernels/runtime.h"
#include "tools/plan_output.h"
#include "train/layout_search.h"

namespace pw::tools {
namespace {

train::SearchSpace search_space_of(const PlanCommand& c, const train::JobConfig& job) {
  PW_INPUT_CHECK(c.devices >= 1, "--search needs --devices N, the devices the layouts may use");
  PW_INPUT_CHECK(c.layout_flag_given.empty(),
                 c.layout_flag_given << ": --search chooses the layout itself; leave it out (--schedule and "
                                        "--recompute narrow the search)");
  PW_INPUT_CHECK(c.devices % c.nodes == 0, "--nodes " << c.nodes << ": " << c.devices
                                                      << " devices do not split evenly over them; give a divisor of --devices");
  train::SearchSpace space;
  space.devices = c.devices;
  space.nodes = c.nodes;
  space.device_memory = job.resources.device_memory;
  if (c.schedule_given) space.schedules = {job.pipeline.schedule};
  PW_INPUT_CHECK(!c.recompute_given || job.pipeline.recompute_stages.empty(),
                 "--recompute " << partition::recompute_text(job.pipeline.recompute, job.pipeline.recompute_stages)
                                << ": --search chooses the stage count, so it takes one of "
                                << enum_choices<partition::Recompute>()
                                << " for every stage (without --recompute it chooses per stage)");
  if (c.recompute_given) {
    space.recompute_search = train::RecomputeSearch::Fixed;
    space.recompute = {job.pipeline.recompute};
  }
  return space;
}

// The stage at the layout's peak, and what it holds.
const train::StagePrediction& peak_stage(const train::LayoutPrediction& p) {
  const train::StagePrediction* peak = &p.stages.front();
  for (const auto& s : p.stages)
    if (s.peak_bytes > peak->peak_bytes) peak = &s;
  return *peak;
}

nlohmann::json layout_json(const train::RankedLayout& l, int rank) {
  nlohmann::json memory = nlohmann::json::array();
  for (const auto& s : l.prediction.stages)
    memory.push_back({{"stage", s.stage},
                      {"peak_bytes", s.peak_bytes},
                      {"other_replicas_peak_bytes", s.other_replicas_peak_bytes},
                      {"by_kind", by_kind_json(s.memory)}});
  return {{"rank", rank},
          {"layout", train::describe_layout(l.config)},
          {"stages", l.config.pipeline.stages},
          {"replicas", l.config.replicas.replicas},
          {"micro_batches", l.config.pipeline.micro_batches},
          {"schedule", enum_name(l.config.pipeline.schedule)},
          {"recompute", partition::recompute_text(l.config.pipeline.recompute, l.config.pipeline.recompute_stages)},
          {"recompute_layers", l.config.pipeline.recompute_layers},
          {"optimizer_state", enum_name(l.config.replicas.optimizer_state)},
          {"split", l.config.pipeline.split},
          {"step_seconds", l.prediction.step_seconds},
          {"pipeline_seconds", l.prediction.simulation.makespan},
          {"peak_bytes", l.prediction.peak_bytes()},
          {"memory", memory},
          {"config", train::to_full_json(l.config)}};
}

void write_config(const std::string& path, const train::JobConfig& config) {
  try {
    write_file_durably(path, train::to_full_json(config).dump(2) + "\n");
  } catch (const InputError& e) {
    throw InputError(std::string("--write-config: ") + e.what());
  }
}

}  // namespace

int run_plan_search(const PlanCommand& c, const train::JobConfig& job, const train::LinkSpeeds& links) {
  const auto space = search_space_of(c, job);
  auto& runtime = kernels::DeviceRuntime::get(job.resources.device);
  if (job.resources.threads > 0) runtime.set_threads(job.resources.threads);
  if (!c.json) {
    std::fprintf(stderr, "searching layouts of %s on %d devices (%d node%s), profiling on %s...\n",
                 job.model.name.c_str(), space.devices, space.nodes, space.nodes == 1 ? "" : "s",
                 job.resources.device.str().c_str());
  }
  const auto result = train::search_layouts(
      job, space, links,
      train::profile_on(job.resources.device, c.repeats, job.seed, train::links_of_space(links, space)));
  if (result.fitting.empty()) {
    throw InputError("no layout of " + job.model.name + " on " + std::to_string(space.devices) + " devices fits " +
                     (space.device_memory > 0 ? "a " + format_bytes(space.device_memory) + " cap per device"
                                              : std::string("them")) +
                     ": the smallest predicted peak of the " + std::to_string(result.considered) +
                     " layouts considered is " + format_bytes(result.smallest_peak) + " per device");
  }
  if (!c.write_config.empty()) write_config(c.write_config, result.fitting.front().config);
  const std::size_t shown = std::min<std::size_t>(result.fitting.size(), static_cast<std::size_t>(c.top));
  if (c.json) {
    nlohmann::json j{{"model", job.model.name},
                     {"devices", space.devices},
                     {"nodes", space.nodes},
                     {"device_memory", space.device_memory > 0 ? nlohmann::json(space.device_memory) : nlohmann::json(nullptr)},
                     {"batch_size", job.data.batch_size},
                     {"considered", result.considered},
                     {"fitting", result.fitting.size()},
                     {"layouts", nlohmann::json::array()}};
    for (std::size_t i = 0; i < shown; ++i) j["layouts"].push_back(layout_json(result.fitting[i], static_cast<int>(i) + 1));
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("search: %s, batch %lld, on %d devices (%d node%s), cap %s per device: %d layouts predicted, %zu fit\n\n",
                job.model.name.c_str(), static_cast<long long>(job.data.batch_size), space.devices, space.nodes,
                space.nodes == 1 ? "" : "s",
                space.device_memory > 0 ? format_bytes(space.device_memory).c_str() : "none", result.considered,
                result.fitting.size());
    for (std::size_t i = 0; i < shown; ++i) {
      const auto& l = result.fitting[i];
      const auto& peak = peak_stage(l.prediction);
      std::printf("%zu. %s\n   step %s, peak %s on stage %d: %s\n", i + 1, train::describe_layout(l.config).c_str(),
                  seconds_text(l.prediction.step_seconds).c_str(), format_bytes(peak.peak_bytes).c_str(), peak.stage,
                  by_kind_text(peak.memory).c_str());
    }
    if (!c.write_config.empty())
      std::printf("\nwrote layout 1 to %s (run it with pipewright train --config %s)\n", c.write_config.c_str(),
                  c.write_config.c_str());
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace pw::tools
