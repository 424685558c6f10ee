#include "tools/prof/analysis.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>

#include "core/error.h"
#include "pipeline/simulator.h"
#include "tools/prof/split_replan.h"

namespace pw::tools {

namespace {

// Stage s's imbalance is worth a suggestion above this.
constexpr double kImbalanceWorthMoving = 0.10;

std::string pct(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%5.1f%%", 100.0 * x);
  return buf;
}

std::string split_text(const std::vector<int>& split) {
  std::string out;
  for (std::size_t i = 0; i < split.size(); ++i) out += (i ? "," : "") + std::to_string(split[i]);
  return out;
}


pipeline::ScheduleSpec spec_of(const TraceMeta& m) {
  pipeline::ScheduleSpec spec;
  spec.kind = pipeline::parse_schedule_kind(m.schedule);
  spec.stages = m.stages;
  spec.micro_batches = m.micro_batches;
  spec.chunks = m.chunks;
  return spec;
}

double analytic_bubble(const TraceMeta& m) {
  const auto spec = spec_of(m);
  // Equal op times: a backward is twice a forward, split evenly for ZB-H1's two halves.
  const bool split_backward = pipeline::splits_backward(spec.kind);
  return pipeline::simulate(spec, pipeline::OpTimes::uniform(spec, 1.0, split_backward ? 1.0 : 2.0,
                                                             split_backward ? 1.0 : 0.0))
      .bubble_fraction;
}

// The schedule's makespan with the op times the trace measured: per piece, each kind's seconds
// per micro-batch (mean over the traced steps and replicas); recomputation counts with the input
// half of the backward it precedes, an unsplit backward as the input half. Transfers are free.
double simulated_step(const TraceData& data, const std::map<std::int64_t, std::pair<std::int64_t, std::int64_t>>& steps) {
  const auto& m = data.meta;
  const auto spec = spec_of(m);
  auto times = pipeline::OpTimes::uniform(spec, 0.0, 0.0, 0.0);
  std::vector<double> optimizer(static_cast<std::size_t>(m.stages), 0.0);
  const double per_op = 1.0 / (static_cast<double>(steps.size()) * m.replicas * m.micro_batches);
  for (const auto& s : data.spans) {
    if (s.stage < 0 || s.stage >= m.stages || s.lane != 0 || steps.count(s.step) == 0) continue;
    const double d = static_cast<double>(s.end_ns - s.start_ns) * 1e-9;
    const auto piece = static_cast<std::size_t>(pipeline::virtual_stage(spec, s.stage, s.chunk));
    if (piece >= times.forward.size()) continue;
    switch (s.kind) {
      case trace::SpanKind::Forward: times.forward[piece] += d * per_op; break;
      case trace::SpanKind::Backward:
      case trace::SpanKind::BackwardInput:
      case trace::SpanKind::Recompute: times.backward_input[piece] += d * per_op; break;
      case trace::SpanKind::BackwardWeight: times.backward_weight[piece] += d * per_op; break;
      case trace::SpanKind::OptimizerStep:
        optimizer[static_cast<std::size_t>(s.stage)] +=
            d / (static_cast<double>(steps.size()) * m.replicas);
        break;
      default: break;
    }
  }
  times.optimizer_step = *std::max_element(optimizer.begin(), optimizer.end());
  return pipeline::simulate(spec, times).makespan;
}

// Moving one boundary layer out of the slowest stage: from its busiest piece into the neighbouring
// piece (the model's previous or next piece) whose stage computes least. With chunks, a piece's
// neighbours live on other stages (interleaved) or on the same one at a V schedule's turn, which
// would not relieve the stage and is never chosen.
std::string suggest(const ProfReport& r, const std::vector<double>& per_stage, const std::vector<double>& per_piece) {
  const auto& m = r.meta;
  const int s = r.slowest_stage;
  const int pieces = m.stages * m.chunks;
  if (m.stages < 2 || r.imbalance <= kImbalanceWorthMoving) return "";
  if (static_cast<int>(m.split.size()) != pieces - 1 || m.layer_names.empty())
    return "stage " + std::to_string(s) + " is the slowest; rebalance with pipewright plan --partition profile";
  const auto spec = spec_of(m);
  const auto stage_of = [&](int v) { return pipeline::locate_virtual_stage(spec, v).stage; };
  int piece = -1;
  for (int c = 0; c < m.chunks; ++c) {
    const int v = pipeline::virtual_stage(spec, s, c);
    if (piece < 0 || per_piece[static_cast<std::size_t>(v)] > per_piece[static_cast<std::size_t>(piece)]) piece = v;
  }
  std::vector<int> begins = {0};
  begins.insert(begins.end(), m.split.begin(), m.split.end());
  begins.push_back(static_cast<int>(m.layer_names.size()));
  const auto at = [](const std::vector<int>& v, int i) { return v[static_cast<std::size_t>(i)]; };
  const int size = at(begins, piece + 1) - at(begins, piece);
  const bool has_next = piece + 1 < pieces && stage_of(piece + 1) != s;
  const bool has_prev = piece > 0 && stage_of(piece - 1) != s;
  const auto where = [&](int v) {
    return m.chunks > 1 ? "stage " + std::to_string(stage_of(v)) + " (piece " + std::to_string(v) + ")"
                        : "stage " + std::to_string(v);
  };
  std::ostringstream out;
  if (size < 2 || (!has_next && !has_prev)) {
    out << where(piece) << " is the slowest but "
        << (size < 2 ? "holds one layer" : "its neighbouring pieces are on the same stage")
        << "; give the pipeline more stages or micro-batches";
    return out.str();
  }
  const bool to_next = has_next && (!has_prev || per_stage[static_cast<std::size_t>(stage_of(piece + 1))] <=
                                                      per_stage[static_cast<std::size_t>(stage_of(piece - 1))]);
  std::vector<int> split = m.split;
  int layer = 0, target = 0;
  if (to_next) {
    layer = at(begins, piece + 1) - 1;
    target = piece + 1;
    split[static_cast<std::size_t>(piece)] -= 1;
  } else {
    layer = at(begins, piece);
    target = piece - 1;
    split[static_cast<std::size_t>(piece) - 1] += 1;
  }
  out << "move layer " << layer << " '" << m.layer_names[static_cast<std::size_t>(layer)] << "' from " << where(piece)
      << " to " << where(target) << ": --split " << split_text(split) << " (now " << split_text(m.split)
      << "); or let pipewright plan --partition profile choose";
  return out.str();
}

}  // namespace

double RankUsage::busy() const { return compute; }

ProfReport analyze(const TraceData& data, const LayerCosts& costs) {
  ProfReport r;
  r.meta = data.meta;
  const auto& m = data.meta;
  // Each step's window: the first to the last span of any rank's step.
  std::map<std::int64_t, std::pair<std::int64_t, std::int64_t>> steps;
  for (const auto& s : data.spans) {
    if (s.kind != trace::SpanKind::Step) continue;
    auto [it, fresh] = steps.try_emplace(s.step, s.start_ns, s.end_ns);
    if (!fresh) {
      it->second.first = std::min(it->second.first, s.start_ns);
      it->second.second = std::max(it->second.second, s.end_ns);
    }
  }
  PW_INPUT_CHECK(!steps.empty(), data.files.front() << ": the trace holds no complete step (were --trace-steps "
                                                       "outside the run?)");
  r.steps = static_cast<int>(steps.size());
  r.first_step = steps.begin()->first;
  r.last_step = steps.rbegin()->first;
  for (const auto& [step, w] : steps) r.window += static_cast<double>(w.second - w.first) * 1e-9;

  const auto spec = spec_of(m);
  std::vector<double> per_piece(static_cast<std::size_t>(m.stages * m.chunks), 0.0);   // mean over replicas
  std::map<int, RankUsage> ranks;
  for (const auto& s : data.spans) {
    if (s.stage < 0 || s.kind == trace::SpanKind::Step || steps.count(s.step) == 0) continue;
    auto& u = ranks[rank_of(m, s)];
    u.rank = rank_of(m, s);
    u.stage = s.stage;
    u.replica = s.replica;
    const double d = static_cast<double>(s.end_ns - s.start_ns) * 1e-9;
    if (s.lane == 1) u.background_allreduce += d;
    else if (trace::is_compute(s.kind)) {
      u.compute += d;
      u.compute_by_kind[s.kind] += d;
      if (s.kind == trace::SpanKind::Recompute) u.recompute += d;
      const int piece = pipeline::virtual_stage(spec, s.stage, s.chunk);
      per_piece[static_cast<std::size_t>(piece)] += d / static_cast<double>(m.replicas);
    } else if (trace::is_communication(s.kind)) u.communication += d;
    else if (s.kind == trace::SpanKind::RecvWait) u.waiting += d;
  }
  for (auto& [rank, u] : ranks) r.ranks.push_back(u);

  std::vector<double> per_stage(static_cast<std::size_t>(m.stages), 0.0);
  std::vector<int> counted(static_cast<std::size_t>(m.stages), 0);
  double busy_sum = 0.0;
  for (const auto& u : r.ranks) {
    per_stage[static_cast<std::size_t>(u.stage)] += u.compute;
    counted[static_cast<std::size_t>(u.stage)] += 1;
    busy_sum += u.compute / r.window;
  }
  for (std::size_t s = 0; s < per_stage.size(); ++s)
    if (counted[s] > 0) per_stage[s] /= counted[s];
  r.measured_bubble = r.ranks.empty() ? 0.0 : 1.0 - busy_sum / static_cast<double>(r.ranks.size());
  r.analytic_bubble = analytic_bubble(m);
  r.simulated_step = simulated_step(data, steps);
  r.slowest_stage = static_cast<int>(std::max_element(per_stage.begin(), per_stage.end()) - per_stage.begin());
  double mean = 0.0;
  for (double x : per_stage) mean += x / static_cast<double>(per_stage.size());
  r.imbalance = mean > 0 ? per_stage[static_cast<std::size_t>(r.slowest_stage)] / mean - 1.0 : 0.0;
  std::set<std::int64_t> traced_steps;
  for (const auto& [step, w] : steps) traced_steps.insert(step);
  const auto replan = replan_split(data, traced_steps, costs);
  if (replan && !replan->split.empty() && replan->traced_step > 0.0) {
    r.suggested_split = replan->split;
    r.predicted_traced_step = replan->traced_step;
    r.predicted_suggested_step = replan->suggested_step;
    char line[1024];
    const std::string gain =
        replan->traced_fit == CapFit::Over
            ? "the traced split is predicted over the device cap, this one fits"
            : std::to_string(static_cast<int>(std::lround(100.0 * (1.0 - replan->suggested_step / replan->traced_step)))) +
                  "% faster";
    std::snprintf(line, sizeof line,
                  "--split %s (now %s): the planner predicts %.2f ms per step against %.2f ms for the traced split "
                  "(%s; each piece's traced time spread over its layers by their profiled costs); "
                  "pipewright plan --split %s shows it",
                  split_text(replan->split).c_str(), split_text(m.split).c_str(), 1e3 * replan->suggested_step,
                  1e3 * replan->traced_step, gain.c_str(), split_text(replan->split).c_str());
    r.suggestion = line;
  } else {
    r.suggestion = suggest(r, per_stage, per_piece);
    if (replan && !r.suggestion.empty())
      r.suggestion += replan->traced_fit == CapFit::Over
                          ? " (the planner, re-planning the traced times, predicts the traced split over the device "
                            "cap and no split that fits)"
                          : " (the planner, re-planning the traced times, predicts no split at least 1% faster)";
  }
  return r;
}

std::string format_report(const ProfReport& r) {
  const auto& m = r.meta;
  std::ostringstream out;
  out << m.model << ", " << m.schedule << ", " << m.stages << " stages";
  if (m.replicas > 1) out << " x " << m.replicas << " replicas";
  out << ", " << m.micro_batches << " micro-batches";
  if (m.chunks > 1) out << ", " << m.chunks << " chunks";
  char line[256];
  std::snprintf(line, sizeof line, "; steps %lld-%lld (%d traced), %.1f ms per step\n",
                static_cast<long long>(r.first_step), static_cast<long long>(r.last_step), r.steps,
                1e3 * r.window / r.steps);
  out << line;
  out << "rank stage replica    busy  bubble | compute  comm    wait    other  recompute  all-reduce (background)\n";
  for (const auto& u : r.ranks) {
    const double c = u.compute / r.window, comm = u.communication / r.window, w = u.waiting / r.window;
    std::snprintf(line, sizeof line, "%4d %5d %7d  %s  %s | %s  %s  %s  %s  %s     %s\n", u.rank, u.stage, u.replica,
                  pct(c).c_str(), pct(1.0 - c).c_str(), pct(c).c_str(), pct(comm).c_str(), pct(w).c_str(),
                  pct(std::max(0.0, 1.0 - c - comm - w)).c_str(),
                  pct(u.compute > 0 ? u.recompute / u.compute : 0.0).c_str(), pct(u.background_allreduce / r.window).c_str());
    out << line;
  }
  // Each rank's compute by operation, as shares of the window: split backwards show their input half
  // (Bi, on the critical path) apart from their weight half (W, what zero-bubble schedules move).
  out << "rank   forward  backward  input(Bi)  weight(W)  recompute  optimizer\n";
  for (const auto& u : r.ranks) {
    const auto share = [&](trace::SpanKind kind) {
      const auto it = u.compute_by_kind.find(kind);
      return pct(it == u.compute_by_kind.end() ? 0.0 : it->second / r.window);
    };
    std::snprintf(line, sizeof line, "%4d    %s    %s     %s     %s     %s     %s\n", u.rank,
                  share(trace::SpanKind::Forward).c_str(), share(trace::SpanKind::Backward).c_str(),
                  share(trace::SpanKind::BackwardInput).c_str(), share(trace::SpanKind::BackwardWeight).c_str(),
                  share(trace::SpanKind::Recompute).c_str(), share(trace::SpanKind::OptimizerStep).c_str());
    out << line;
  }
  std::snprintf(line, sizeof line, "bubble: measured %.1f%% (mean over ranks), analytic %.1f%% (%s with equal op times)\n",
                100.0 * r.measured_bubble, 100.0 * r.analytic_bubble, m.schedule.c_str());
  out << line;
  if (r.simulated_step > 0) {
    const double step = r.window / r.steps;
    std::snprintf(line, sizeof line,
                  "step: measured %.2f ms, simulated %.2f ms (%s with the traced op times, transfers free): %.2fx\n",
                  1e3 * step, 1e3 * r.simulated_step, m.schedule.c_str(), step / r.simulated_step);
    out << line;
  }
  std::snprintf(line, sizeof line, "slowest stage: %d (%.0f%% above the mean stage's compute)\n", r.slowest_stage,
                100.0 * r.imbalance);
  out << line;
  out << "suggestion: " << (r.suggestion.empty() ? "none; the stages are balanced within 10%" : r.suggestion) << "\n";
  if (m.dropped_spans > 0)
    out << "note: " << m.dropped_spans << " spans were dropped when the trace ring filled; trace fewer steps\n";
  return out.str();
}

nlohmann::json report_json(const ProfReport& r) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const auto& u : r.ranks) {
    nlohmann::json by_op = nlohmann::json::object();
    for (const auto& [kind, seconds] : u.compute_by_kind) by_op[trace::span_kind_name(kind)] = seconds / r.window;
    ranks.push_back({{"rank", u.rank},
                     {"stage", u.stage},
                     {"replica", u.replica},
                     {"busy", u.compute / r.window},
                     {"bubble", 1.0 - u.compute / r.window},
                     {"communication", u.communication / r.window},
                     {"waiting", u.waiting / r.window},
                     {"recompute_share", u.compute > 0 ? u.recompute / u.compute : 0.0},
                     {"background_allreduce", u.background_allreduce / r.window},
                     {"compute_by_op", by_op}});
  }
  return {{"model", r.meta.model},           {"schedule", r.meta.schedule},
          {"stages", r.meta.stages},         {"replicas", r.meta.replicas},
          {"micro_batches", r.meta.micro_batches}, {"steps", r.steps},
          {"step_ms", 1e3 * r.window / r.steps}, {"ranks", ranks},
          {"measured_bubble", r.measured_bubble}, {"analytic_bubble", r.analytic_bubble},
          {"simulated_step_ms", 1e3 * r.simulated_step},
          {"measured_over_simulated", r.simulated_step > 0 ? r.window / r.steps / r.simulated_step : 0.0},
          {"slowest_stage", r.slowest_stage}, {"imbalance", r.imbalance},
          {"suggestion", r.suggestion},
          {"suggested_split", r.suggested_split},
          {"predicted_traced_step_ms", 1e3 * r.predicted_traced_step},
          {"predicted_suggested_step_ms", 1e3 * r.predicted_suggested_step}};
}

}  // namespace pw::tools
