#include "train/layout_search.h"

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <tuple>

#include "core/error.h"
#include "partition/selective_recompute.h"
#include "pipeline/schedule.h"

namespace pw::train {
namespace {

struct Candidate {
  int stages = 1;
  int replicas = 1;
  int micro_batches = 1;
  pipeline::ScheduleKind schedule = pipeline::ScheduleKind::OneFOneB;
  partition::Recompute recompute = partition::Recompute::None;
  dp::OptimizerState optimizer_state = dp::OptimizerState::Replicated;
  models::OptimizerOffload offload = models::OptimizerOffload::None;
};

std::vector<Candidate> candidates(const JobConfig& base, const SearchSpace& space, int layers) {
  std::vector<Candidate> out;
  const std::int64_t batch = base.data.batch_size;
  for (int P = 1; P <= std::min(space.devices, layers); ++P) {
    for (int R = 1; P * R <= space.devices; ++R) {
      if (batch % R != 0) continue;
      const std::int64_t local = batch / R;
      // One stage: every schedule runs the same program; micro-batches only trade speed for memory.
      const auto schedules = P == 1 ? std::vector<pipeline::ScheduleKind>{pipeline::ScheduleKind::OneFOneB}
                                    : space.schedules;
      for (const auto kind : schedules) {
        if (P * pipeline::default_chunks(kind) > layers) continue;
        for (int factor = 1; factor <= space.max_micro_batches_per_stage; factor *= 2) {
          const int M = P * factor;
          if (local % M != 0) continue;
          const auto recomputes = space.recompute_search == RecomputeSearch::PerStage
                                      ? std::vector<partition::Recompute>{partition::Recompute::None}
                                      : space.recompute;
          for (const auto recompute : recomputes) {
            for (const auto state : {dp::OptimizerState::Replicated, dp::OptimizerState::Sharded}) {
              if (state == dp::OptimizerState::Sharded && R == 1) continue;
              for (const auto offload : space.offload) out.push_back({P, R, M, kind, recompute, state, offload});
            }
          }
        }
      }
    }
  }
  return out;
}

JobConfig config_of(const JobConfig& base, const Candidate& c, const SearchSpace& space) {
  JobConfig job = base;
  job.pipeline.stages = c.stages;
  job.pipeline.micro_batches = c.micro_batches;
  job.pipeline.schedule = c.schedule;
  job.pipeline.chunks = 0;
  job.pipeline.split.clear();
  job.pipeline.partition = partition::PartitionMethod::Profile;
  job.pipeline.recompute = c.recompute;
  job.pipeline.recompute_stages.clear();
  job.pipeline.recompute_layers.clear();
  job.pipeline.schedule_file.clear();
  job.replicas.replicas = c.replicas;
  job.replicas.optimizer_state = c.optimizer_state;
  job.optimizer.offload = c.offload;
  job.resources.device_memory = space.device_memory;
  job.resources.devices.clear();
  return job;
}

std::vector<int> split_points_of(const partition::Partition& split) {
  std::vector<int> points;
  for (std::size_t i = 1; i < split.size(); ++i) points.push_back(split[i].begin);
  return points;
}

struct Predicted {
  JobPlan plan;
  LayoutPrediction prediction;
  std::vector<partition::LayerProfile> profiles;
};

Predicted predict(const JobConfig& job, const LinkSpeeds& links, const LayerProfiler& profiler) {
  Predicted p;
  p.plan = plan_job(job);
  p.profiles = profiler(p.plan, micro_batch_size_of(p.plan));
  p.prediction = predict_balanced_split(p.plan, p.profiles, links);
  return p;
}

// Seconds a step spends re-running stage `stage`'s forwards if it recomputes.
double recompute_seconds(const LayoutPrediction& p, int stage) {
  double forward = 0.0;
  for (const auto& e : p.pieces)
    if (e.device == stage) forward += e.forward_seconds;
  return forward * p.cost.micro_batches;
}

// The next stage to recompute: one over its cap if any is left, else any; the cheapest of those.
// -1 when every stage recomputes already.
int next_stage_to_recompute(const LayoutPrediction& p, const std::vector<partition::Recompute>& chosen) {
  int best = -1;
  bool best_over = false;
  double best_cost = 0.0;
  for (int d = 0; d < static_cast<int>(chosen.size()); ++d) {
    if (chosen[static_cast<std::size_t>(d)] == partition::Recompute::All) continue;
    const bool over = !p.stages.at(static_cast<std::size_t>(d)).fits();
    const double cost = recompute_seconds(p, d);
    if (best < 0 || (over && !best_over) || (over == best_over && cost < best_cost)) {
      best = d;
      best_over = over;
      best_cost = cost;
    }
  }
  return best;
}

void set_recompute(PipelineConfig& pipeline, const std::vector<partition::Recompute>& chosen) {
  const auto all = [&](partition::Recompute r) { return std::all_of(chosen.begin(), chosen.end(), [r](auto c) { return c == r; }); };
  pipeline.recompute_stages.clear();
  if (all(partition::Recompute::None)) pipeline.recompute = partition::Recompute::None;
  else if (all(partition::Recompute::All)) pipeline.recompute = partition::Recompute::All;
  else {
    pipeline.recompute = partition::Recompute::None;
    pipeline.recompute_stages = chosen;
  }
}

// Selective recomputation for stage `stage`, over its cap (Megatron's selective recomputation
// picks the activations that are large and cheap to make again): of the runs of consecutive layers
// of the stage that do not recompute yet, the one that frees the most stash bytes per second of
// forward it re-runs is added, then the next (with what is chosen by then), until the bytes freed
// (scaled as the stage's predicted activations are to its stash: micro-batches in flight,
// precision) cover the excess; then the layout is predicted again. Runs, not single layers: a layer
// whose input the layer before keeps frees nothing alone. Until the stage fits (true) or no run
// frees anything (false).
bool recompute_layers_until_fit(JobConfig& job, Predicted& p, int stage, const LinkSpeeds& links,
                                const LayerProfiler& profiler) {
  auto& chosen = job.pipeline.recompute_layers;
  const auto held_by_stage = [&](const std::set<std::string>& with) {
    std::int64_t held = 0;
    for (const auto& e : p.prediction.pieces)
      if (e.device == stage)
        held += partition::piece_stash(p.profiles, e.range, with,
                                       e.piece == 0 ? partition::PieceInput::HeldElsewhere : partition::PieceInput::Received)
                    .held_bytes;
    return held;
  };
  for (;;) {
    const auto& d = p.prediction.stages.at(static_cast<std::size_t>(stage));
    if (d.fits()) return true;
    std::set<std::string> current(chosen.begin(), chosen.end());
    const std::int64_t held = held_by_stage(current);
    if (held <= 0) return false;
    const double scale = static_cast<double>(d.memory[static_cast<std::size_t>(kernels::MemoryKind::Activations)]) /
                         static_cast<double>(held);
    const double excess = static_cast<double>(d.peak_bytes - d.memory_cap);
    double freed = 0.0;
    bool added = false;
    while (freed < excess) {
      const std::int64_t now = held_by_stage(current);
      double best_ratio = 0.0;
      std::int64_t best_freed = 0;
      std::vector<std::string> best;
      for (const auto& e : p.prediction.pieces) {
        if (e.device != stage) continue;
        for (int a = e.range.begin; a < e.range.end; ++a) {
          auto with = current;
          std::vector<std::string> run;
          double seconds = 0.0;
          for (int b = a; b < e.range.end; ++b) {
            const auto& layer = p.profiles.at(static_cast<std::size_t>(b));
            if (current.contains(layer.name)) break;
            with.insert(layer.name);
            run.push_back(layer.name);
            seconds += layer.forward_seconds;
            const std::int64_t gain = now - held_by_stage(with);
            const double ratio = static_cast<double>(gain) / std::max(seconds, 1e-9);
            if (gain > 0 && ratio > best_ratio) {
              best_ratio = ratio;
              best_freed = gain;
              best = run;
            }
          }
        }
      }
      if (best.empty()) break;
      for (const auto& name : best) {
        current.insert(name);
        chosen.push_back(name);
      }
      freed += scale * static_cast<double>(best_freed);
      added = true;
    }
    if (!added) return false;
    p = predict(job, links, profiler);
  }
}

// The stage's layers out of the selective list (it recomputes all of them now).
void drop_layers_of(JobConfig& job, const Predicted& p, int stage) {
  auto& chosen = job.pipeline.recompute_layers;
  for (const auto& e : p.prediction.pieces)
    if (e.device == stage)
      for (const auto& name : e.layer_names) chosen.erase(std::remove(chosen.begin(), chosen.end(), name), chosen.end());
}

// The layout without recomputation; while a stage is over its cap, recomputation turned on for one
// more stage (those over the cap first, the cheapest first) and the split chosen again for it: for a
// stage over its cap, chosen layers first (recompute_layers_until_fit), the whole stage when even
// all of them leave it over.
Predicted predict_recomputing_where_needed(JobConfig& job, const LinkSpeeds& links, const LayerProfiler& profiler) {
  std::vector<partition::Recompute> chosen(static_cast<std::size_t>(std::max(1, job.pipeline.stages)),
                                           partition::Recompute::None);
  set_recompute(job.pipeline, chosen);
  job.pipeline.recompute_layers.clear();
  Predicted p = predict(job, links, profiler);
  std::set<int> tried_layers;
  while (!p.prediction.fits()) {
    const int stage = next_stage_to_recompute(p.prediction, chosen);
    if (stage < 0) break;
    if (!p.prediction.stages.at(static_cast<std::size_t>(stage)).fits() && tried_layers.insert(stage).second) {
      const JobConfig before = job;
      const Predicted predicted_before = p;
      if (recompute_layers_until_fit(job, p, stage, links, profiler)) continue;
      job = before;   // and the prediction (and split) that went with it
      p = predicted_before;
    }
    drop_layers_of(job, p, stage);
    chosen[static_cast<std::size_t>(stage)] = partition::Recompute::All;
    set_recompute(job.pipeline, chosen);
    p = predict(job, links, profiler);
  }
  return p;
}

}  // namespace

LinkSpeeds links_of_space(const LinkSpeeds& links, const SearchSpace& space) {
  LinkSpeeds node_links = links;
  if (space.nodes > 1) {
    node_links.devices_per_node = space.devices / space.nodes;
    node_links.host_cores = 0;   // the ranks are on several hosts: their sharing is not modelled
  }
  return node_links;
}

LayerProfiler profile_on(kernels::Device device, int repeats, std::uint64_t seed, const LinkSpeeds& links) {
  // By micro-batch size, micro-batches in flight, optimizer (the profile times the optimizer's
  // step too) and co-runners.
  using Key = std::tuple<std::int64_t, int, models::OptimizerKind, int>;
  auto cache = std::make_shared<std::map<Key, std::vector<partition::LayerProfile>>>();
  return [device, repeats, seed, links, cache](const JobPlan& plan, std::int64_t micro_batch_size) {
    const auto options = prediction_profile_options(plan, micro_batch_size, repeats, seed, links);
    const Key key{micro_batch_size, options.micro_batches_in_flight, plan.optimizer.kind, options.co_runners};
    auto it = cache->find(key);
    if (it == cache->end()) it = cache->emplace(key, partition::profile_layers(plan.model, device, options)).first;
    return it->second;
  };
}

SearchResult search_layouts(const JobConfig& base, const SearchSpace& space, const LinkSpeeds& links,
                            const LayerProfiler& profiler) {
  PW_INPUT_CHECK(space.devices >= 1, "a layout search needs at least 1 device, got " << space.devices);
  PW_INPUT_CHECK(space.nodes >= 1 && space.devices % space.nodes == 0,
                 space.devices << " devices do not split evenly over " << space.nodes << " nodes");
  const LinkSpeeds node_links = links_of_space(links, space);
  // The base config as given, planned once: its errors are the user's, not a layout's.
  JobConfig one = base;
  one.pipeline = PipelineConfig{};
  one.pipeline.micro_batches = 1;
  one.replicas.replicas = 1;
  const JobPlan base_plan = plan_job(one);

  SearchResult result;
  result.smallest_peak = -1;
  for (const auto& c : candidates(base, space, base_plan.model.layer_count())) {
    JobConfig job = config_of(base, c, space);
    try {
      plan_job(job);
    } catch (const InputError&) {
      continue;   // a shape this model or batch cannot take (e.g. more pieces than layers)
    }
    Predicted predicted = space.recompute_search == RecomputeSearch::PerStage
                              ? predict_recomputing_where_needed(job, node_links, profiler)
                              : predict(job, node_links, profiler);
    auto& prediction = predicted.prediction;
    ++result.considered;
    const auto peak = prediction.peak_bytes();
    if (result.smallest_peak < 0 || peak < result.smallest_peak) result.smallest_peak = peak;
    if (!prediction.fits()) continue;
    job.pipeline.split = split_points_of(prediction.partition);
    job.pipeline.stages = c.stages;
    result.fitting.push_back({std::move(job), std::move(prediction)});
  }
  std::stable_sort(result.fitting.begin(), result.fitting.end(), [](const RankedLayout& a, const RankedLayout& b) {
    if (a.prediction.step_seconds != b.prediction.step_seconds)
      return a.prediction.step_seconds < b.prediction.step_seconds;
    // As fast either way (CPU devices): the state stays where the job runs.
    if (a.config.optimizer.offload != b.config.optimizer.offload)
      return a.config.optimizer.offload == models::OptimizerOffload::None;
    return a.prediction.peak_bytes() < b.prediction.peak_bytes();
  });
  if (result.smallest_peak < 0) result.smallest_peak = 0;
  return result;
}

std::string describe_layout(const JobConfig& c) {
  std::ostringstream out;
  const int P = std::max(1, c.pipeline.stages), R = c.replicas.replicas;
  out << P << (P == 1 ? " stage" : " stages") << " x " << R << (R == 1 ? " replica" : " replicas") << ", "
      << enum_name(c.pipeline.schedule) << ", " << c.pipeline.micro_batches
      << (c.pipeline.micro_batches == 1 ? " micro-batch" : " micro-batches") << ", recompute";
  // Chosen layers recompute in stages that recompute nothing whole: "recompute layers a b", or
  // beside stages that do, "recompute all, none and layers a b".
  const auto& per_stage = c.pipeline.recompute_stages;
  bool whole = false;
  for (int s = 0; s < P; ++s) whole = whole || partition::stage_recomputes(c.pipeline.recompute, per_stage, s, P);
  if (c.pipeline.recompute_layers.empty() || whole) out << " " << partition::recompute_text(c.pipeline.recompute, per_stage);
  if (!c.pipeline.recompute_layers.empty()) {
    out << (whole ? " and layers" : " layers");
    for (const auto& name : c.pipeline.recompute_layers) out << " " << name;
  }
  if (R > 1) out << ", " << (c.replicas.optimizer_state == dp::OptimizerState::Sharded ? "sharded" : "replicated")
                 << " optimizer state";
  if (c.optimizer.offload == models::OptimizerOffload::Host) out << ", offloaded to the host";
  return out.str();
}

}  // namespace pw::train
