#include "tools/prof/split_replan.h"

#include <cmath>
#include <functional>
#include <limits>

#include "core/error.h"
#include "partition/profiler.h"
#include "pipeline/schedule.h"
#include "train/job_plan.h"
#include "train/layout_prediction.h"

namespace pw::tools {
namespace {

// A re-planned split must beat the traced one by this much: less is within the prediction's error.
constexpr double kWorthMoving = 0.01;

struct PieceTimes {
  std::vector<double> forward, backward;   // seconds per micro-batch; backward without recomputation
  // Of `backward`, what ran as the two halves of a split backward (zero-bubble kinds).
  std::vector<double> input_half, weight_half;
  double link_seconds = 0.0;               // the traced steps' sends and received tensors' copies, all pieces
};

PieceTimes traced_piece_times(const train::TraceData& data, const pipeline::ScheduleSpec& spec,
                              const std::set<std::int64_t>& steps) {
  const auto& m = data.meta;
  const auto pieces = static_cast<std::size_t>(spec.stages * spec.chunks);
  PieceTimes t{std::vector<double>(pieces, 0.0), std::vector<double>(pieces, 0.0), std::vector<double>(pieces, 0.0),
               std::vector<double>(pieces, 0.0)};
  const double per_op = 1.0 / (static_cast<double>(steps.size()) * m.replicas * m.micro_batches);
  for (const auto& s : data.spans) {
    if (s.stage < 0 || s.stage >= m.stages || s.lane != 0 || steps.count(s.step) == 0) continue;
    const auto piece = static_cast<std::size_t>(pipeline::virtual_stage(spec, s.stage, s.chunk));
    if (piece >= pieces) continue;
    const double d = static_cast<double>(s.end_ns - s.start_ns) * 1e-9 * per_op;
    if (s.kind == trace::SpanKind::Send || s.kind == trace::SpanKind::Transfer) t.link_seconds += d;
    if (s.kind == trace::SpanKind::Forward) t.forward[piece] += d;
    else if (s.kind == trace::SpanKind::Backward || s.kind == trace::SpanKind::BackwardInput ||
             s.kind == trace::SpanKind::BackwardWeight)
      t.backward[piece] += d;
    if (s.kind == trace::SpanKind::BackwardInput) t.input_half[piece] += d;
    if (s.kind == trace::SpanKind::BackwardWeight) t.weight_half[piece] += d;
  }
  return t;
}

// Each layer's profiled time scaled so that its piece sums to the traced time; evenly where the
// profile measured nothing. A trace of a split backward gives the halves; its fused backward is
// the profiled one slowed as the halves were. A trace of a fused backward gives that; the halves
// are the profiled ones slowed as it was.
void spread(std::vector<partition::LayerProfile>& layers, const partition::Partition& split, const PieceTimes& traced) {
  for (std::size_t v = 0; v < split.size(); ++v) {
    const auto [begin, end] = std::pair(split[v].begin, split[v].end);
    double forward = 0.0, backward = 0.0, input_half = 0.0, weight_half = 0.0;
    for (int i = begin; i < end; ++i) {
      const auto& l = layers[static_cast<std::size_t>(i)];
      forward += l.forward_seconds;
      backward += l.backward_seconds;
      input_half += l.input_half_seconds;
      weight_half += l.weight_half_seconds;
    }
    const double n = end - begin;
    const bool traced_halves = traced.input_half[v] > 0.0 || traced.weight_half[v] > 0.0;
    const bool profiled_halves = input_half > 0.0 && weight_half > 0.0;
    // The fused backward the trace implies, and the halves.
    double fused = traced.backward[v], in = traced.input_half[v], w = traced.weight_half[v];
    if (traced_halves && profiled_halves && backward > 0.0) fused = backward * (in + w) / (input_half + weight_half);
    if (!traced_halves && profiled_halves && backward > 0.0) {
      in = input_half * fused / backward;
      w = weight_half * fused / backward;
    }
    const auto scaled = [n](double profiled, double piece_profiled, double piece_traced) {
      return piece_profiled > 0 ? profiled / piece_profiled * piece_traced : piece_traced / n;
    };
    for (int i = begin; i < end; ++i) {
      auto& l = layers[static_cast<std::size_t>(i)];
      l.forward_seconds = scaled(l.forward_seconds, forward, traced.forward[v]);
      l.backward_seconds = scaled(l.backward_seconds, backward, fused);
      if (profiled_halves || traced_halves) {
        l.input_half_seconds = scaled(l.input_half_seconds, input_half, in);
        l.weight_half_seconds = scaled(l.weight_half_seconds, weight_half, w);
      }
    }
  }
}

std::vector<int> split_points_of(const partition::Partition& split) {
  std::vector<int> points;
  for (std::size_t i = 1; i < split.size(); ++i) points.push_back(split[i].begin);
  return points;
}

// Every way to cut `layers` layers into `pieces` pieces, while there are at most this many; beyond,
// a descent from the traced split and the partitioner's by one-layer moves of a boundary.
constexpr std::int64_t kEveryCutUpTo = 5000;

std::int64_t cuts(int layers, int pieces) {   // C(layers - 1, pieces - 1), capped past kEveryCutUpTo
  std::int64_t c = 1;
  const int n = layers - 1, k = pieces - 1;
  for (int i = 1; i <= k; ++i) {
    c = c * (n - k + i) / i;
    if (c > kEveryCutUpTo) return c;
  }
  return c;
}

// The split points the prediction ranks fastest, from `starts`.
std::vector<int> fastest_split(int layers, int pieces, const std::vector<std::vector<int>>& starts,
                               const std::function<double(const std::vector<int>&)>& step) {
  std::vector<int> best = starts.front();
  double best_step = step(best);
  const auto consider = [&](const std::vector<int>& points) {
    const double s = step(points);
    if (s < best_step) {
      best_step = s;
      best = points;
      return true;
    }
    return false;
  };
  if (cuts(layers, pieces) <= kEveryCutUpTo) {
    std::vector<int> points(static_cast<std::size_t>(pieces - 1));
    const std::function<void(int, int)> each = [&](int index, int first) {
      if (index == pieces - 1) return void(consider(points));
      for (int p = first; p <= layers - (pieces - 1 - index); ++p) {
        points[static_cast<std::size_t>(index)] = p;
        each(index + 1, p + 1);
      }
    };
    each(0, 1);
    return best;
  }
  for (const auto& start : starts) {
    consider(start);
    std::vector<int> at = start;
    for (bool moved = true; moved;) {
      moved = false;
      for (std::size_t i = 0; i < at.size() && !moved; ++i)
        for (const int d : {-1, 1}) {
          std::vector<int> next = at;
          next[i] += d;
          const int low = i == 0 ? 1 : next[i - 1] + 1, high = i + 1 == at.size() ? layers - 1 : next[i + 1] - 1;
          if (next[i] < low || next[i] > high || step(next) >= step(at)) continue;
          at = next;
          consider(at);
          moved = true;
          break;
        }
    }
  }
  return best;
}

// The link speeds of the traced job's devices (cpu:0 for a trace that does not say), with, on CPU
// devices, the stage links' bandwidth measured: the bytes its pieces sent across stages (each
// activation forward and each gradient back, per micro-batch, as profiled) over the traced sends
// and copies. The device name was checked when the trace was re-planned.
train::LinkSpeeds traced_links(const train::TraceMeta& m, const train::JobPlan& plan,
                               const std::vector<partition::LayerProfile>& layers, const partition::Partition& split,
                               const PieceTimes& traced) {
  const auto device = m.device.empty() ? kernels::Device::cpu(0) : kernels::Device::parse(m.device);
  auto links = train::default_link_speeds(device);
  // A GPU's send is an enqueue on a stream: its span says nothing of the link.
  if (device.is_cuda()) return links;
  std::int64_t bytes = 0;
  for (std::size_t v = 0; v + 1 < split.size(); ++v) {
    // A V schedule's turn stays on its stage: no link crossed, no send traced.
    const int here = pipeline::locate_virtual_stage(plan.schedule, static_cast<int>(v)).stage;
    const int next = pipeline::locate_virtual_stage(plan.schedule, static_cast<int>(v) + 1).stage;
    if (here != next) bytes += 2 * layers.at(static_cast<std::size_t>(split[v].end - 1)).output_bytes;   // forward and back
  }
  // per_op above divides by replicas x micro-batches: `bytes` is one micro-batch's on one replica.
  if (bytes > 0 && traced.link_seconds > 0.0) links.stage_bytes_per_s = static_cast<double>(bytes) / traced.link_seconds;
  return links;
}

}  // namespace

std::vector<partition::LayerProfile> profile_on_cpu(const partition::ModelDescription& model, std::int64_t micro_batch) {
  return partition::profile_layers(model, kernels::Device::cpu(0), micro_batch, 1);
}

std::optional<SplitReplan> replan_split(const train::TraceData& data, const std::set<std::int64_t>& steps,
                                        const LayerCosts& costs) {
  const auto& m = data.meta;
  if (!m.job.is_object() || m.stages < 2 || steps.empty()) return std::nullopt;
  train::JobPlan plan;
  try {
    auto config = train::job_config_from_json(m.job);
    config.pipeline.split = m.split;
    // Where it ran, which the recorded config leaves out.
    config.resources.device_memory = m.device_memory;
    config.resources.threads = m.threads;
    config.resources.prefetch_batches = m.prefetch_batches;
    // A GPU job re-planned on a machine without one plans as on cpu:0 (the plan checks its devices);
    // its link speeds stay the GPU's (traced_links).
    if (!m.device.empty()) {
      const auto device = kernels::Device::parse(m.device);
      if (device.is_cpu()) config.resources.device = device;
    }
    plan = train::plan_job(config);
  } catch (const InputError&) {
    return std::nullopt;   // not a job this machine can build: the single-layer move stands
  }
  if (plan.schedule.stages != m.stages || plan.schedule.chunks != m.chunks ||
      plan.schedule.micro_batches != m.micro_batches || plan.replicas() != m.replicas ||
      static_cast<std::size_t>(plan.model.layer_count()) != m.layer_names.size())
    return std::nullopt;
  const auto traced_split = partition::split_at(plan.model.layer_count(), m.split);
  auto layers = costs(plan.model, train::micro_batch_size_of(plan));
  const auto traced = traced_piece_times(data, plan.schedule, steps);
  spread(layers, traced_split, traced);
  const auto links = traced_links(m, plan, layers, traced_split, traced);
  const int layer_count = plan.model.layer_count();
  // A split whose predicted peak is over the traced job's cap is no suggestion.
  const auto step = [&](const std::vector<int>& points) {
    const auto p = train::predict_layout(plan, layers, partition::split_at(layer_count, points), links);
    return p.fits() ? p.step_seconds : std::numeric_limits<double>::infinity();
  };
  // The partitioner's split (the layout search's) balances the slowest piece; the prediction ranks
  // it, the traced split, and the splits around them.
  const auto balanced = split_points_of(train::predict_balanced_split(plan, layers, links).partition);
  const auto points = fastest_split(layer_count, static_cast<int>(traced_split.size()), {m.split, balanced}, step);
  const auto traced_prediction = train::predict_layout(plan, layers, traced_split, links);
  const double traced_step = traced_prediction.step_seconds, suggested = step(points);
  SplitReplan out{{}, traced_step, traced_step, traced_prediction.fits() ? CapFit::Fits : CapFit::Over,
                  links.stage_bytes_per_s};
  // Over the cap, any split that fits is worth moving to; else it must be faster by enough.
  const bool worth = out.traced_fit == CapFit::Over ? std::isfinite(suggested)
                                                     : suggested <= traced_step * (1.0 - kWorthMoving);
  if (points == m.split || !worth) return out;
  out.split = points;
  out.suggested_step = suggested;
  return out;
}

}  // namespace pw::tools
