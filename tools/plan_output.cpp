#include "tools/plan_output.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>

#include "core/units.h"
#include "partition/partitioners.h"

namespace pw::tools {
namespace {

// "none", "none,all", or with chosen layers "none + layers block3,block4".
std::string recompute_text(const partition::CostModel& cost) {
  std::string text = partition::recompute_text(cost.recompute, cost.recompute_stages);
  if (cost.recompute_layers.empty()) return text;
  text += " + layers ";
  bool first = true;
  for (const auto& name : cost.recompute_layers) text += (std::exchange(first, false) ? "" : ",") + name;
  return text;
}


using kernels::MemoryKind;

std::string count_text(std::int64_t n) {
  std::string digits = std::to_string(n), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string shape_text(const kernels::Shape& shape) {
  std::string out;
  for (const auto d : shape) out += (out.empty() ? "" : "x") + std::to_string(d);
  return out;
}

std::string stage_label(const partition::StageEstimate& e, int chunks) {
  return chunks > 1 ? std::to_string(e.device) + "." + std::to_string(e.chunk) : std::to_string(e.device);
}

constexpr MemoryKind kKinds[] = {MemoryKind::Parameters,     MemoryKind::Gradients,   MemoryKind::MasterWeights,
                                 MemoryKind::OptimizerState, MemoryKind::Activations, MemoryKind::Communication,
                                 MemoryKind::Workspace};

std::int64_t bytes_of(const kernels::BytesByKind& bytes, MemoryKind kind) { return bytes[static_cast<std::size_t>(kind)]; }

std::string optimizer_text(const train::JobPlan& plan) {
  std::string text = std::string(enum_name(plan.optimizer.kind));
  if (plan.replicas() > 1 && plan.config.replicas.optimizer_state == dp::OptimizerState::Sharded)
    text += " (state sharded over " + std::to_string(plan.replicas()) + " replicas)";
  return text;
}

}  // namespace

std::string seconds_text(double s) {
  char buf[32];
  if (s >= 1.0) std::snprintf(buf, sizeof buf, "%.3f s", s);
  else if (s >= 1e-3) std::snprintf(buf, sizeof buf, "%.2f ms", s * 1e3);
  else std::snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
  return buf;
}

nlohmann::json by_kind_json(const kernels::BytesByKind& bytes) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto kind : kKinds) j[kernels::memory_kind_name(kind)] = bytes_of(bytes, kind);
  return j;
}

std::string by_kind_text(const kernels::BytesByKind& bytes) {
  std::string out;
  for (const auto kind : kKinds) {
    if (bytes_of(bytes, kind) == 0) continue;
    out += (out.empty() ? "" : ", ") + std::string(kernels::memory_kind_name(kind)) + " " +
           format_bytes(bytes_of(bytes, kind));
  }
  return out;
}

void print_plan(const PlanReport& r) {
  const auto& plan = r.job;
  const auto& p = r.prediction;
  const auto& s = plan.schedule;
  std::printf("plan: %s (%s parameters, %d layers, samples %s) on %s with %d threads\n", plan.model.name.c_str(),
              count_text(r.parameters).c_str(), plan.model.layer_count(), shape_text(plan.model.sample_shape).c_str(),
              r.device.str().c_str(), r.threads);
  std::printf("schedule %s, %d stages%s, %d micro-batches of %lld (batch %lld%s), %s, %s, recompute %s, partition %s\n",
              pipeline::schedule_kind_name(s.kind).c_str(), s.stages,
              s.chunks > 1 ? (" x " + std::to_string(s.chunks) + " chunks").c_str() : "", s.micro_batches,
              static_cast<long long>(train::micro_batch_size_of(plan)), static_cast<long long>(plan.config.data.batch_size),
              plan.replicas() > 1 ? (" over " + std::to_string(plan.replicas()) + " replicas").c_str() : "",
              enum_name(plan.precision).data(), optimizer_text(plan).c_str(),
              recompute_text(p.cost).c_str(), r.method.c_str());
  const std::int64_t cap = p.cost.memory_cap(0);
  std::printf("memory cap %s per device, link %.1f GB/s", cap > 0 ? format_bytes(cap).c_str() : "none",
              r.links.stage_bytes_per_s / 1e9);
  if (r.links.latency_s > 0.0) std::printf(" and %.0f us a message", r.links.latency_s * 1e6);
  std::printf(" between stages");
  if (plan.replicas() > 1)
    std::printf(", replicas' all-reduce %.2f GB/s, %.0f us a step and %.0f us a call", r.links.replica_bytes_per_s / 1e9,
                r.links.replica_latency_s * 1e6, r.links.replica_call_s * 1e6);
  if (train::core_sharing_of(r.job, r.links).oversubscribed(r.job.schedule.stages))
    std::printf(", %.0f us a message waiting for a core", r.links.busy_handoff_s * 1e6);
  std::printf("\n\n");
  std::printf("%-6s %-12s %-32s %12s %11s %11s %11s\n", "stage", "layers", "first .. last", "params", "F+B / mb",
              "send / mb", "step time");
  for (const auto& e : p.pieces) {
    const std::string range = std::to_string(e.range.begin) + "-" + std::to_string(e.range.end - 1) + " (" +
                              std::to_string(e.range.size()) + ")";
    const std::string names = e.layer_names.front() + " .. " + e.layer_names.back();
    std::printf("%-6s %-12s %-32s %12s %11s %11s %11s\n", stage_label(e, s.chunks).c_str(), range.c_str(), names.c_str(),
                count_text(e.parameters).c_str(), seconds_text(e.forward_seconds + e.backward_seconds).c_str(),
                seconds_text(e.send_seconds).c_str(), seconds_text(e.step_seconds).c_str());
  }
  for (const auto& tied : plan.model.tied) {
    std::printf("tied weight %s on stages", tied.name.c_str());
    for (const int stage : partition::tied_stages(plan.model, p.partition, tied)) std::printf(" %d", stage % s.stages);
    std::printf("\n");
  }
  std::printf("\npredicted memory per device at its peak, by kind:\n");
  for (const auto& st : p.stages) {
    std::string line = format_bytes(st.peak_bytes);
    if (st.memory_cap > 0) line += " of " + format_bytes(st.memory_cap) + (st.fits() ? "" : "  OVER");
    std::printf("stage %d: %s  (%s)\n", st.stage, line.c_str(), by_kind_text(st.memory).c_str());
    if (st.other_replicas_peak_bytes != st.peak_bytes)
      std::printf("         %s on its other replicas' ranks (replica 0's holds every replica's loader batches)\n",
                  format_bytes(st.other_replicas_peak_bytes).c_str());
  }
  const auto slowest = std::max_element(p.stages.begin(), p.stages.end(), [](const auto& a, const auto& b) {
    return a.pipeline_seconds < b.pipeline_seconds;
  });
  double tail = 0.0, sync = 0.0, optimizer = 0.0;
  for (const auto& st : p.stages) {
    if (st.gradient_sync_seconds + st.optimizer_seconds < tail) continue;
    tail = st.gradient_sync_seconds + st.optimizer_seconds;
    sync = st.gradient_sync_seconds;
    optimizer = st.optimizer_seconds;
  }
  std::printf("\npredicted step time %s: pipeline %s (%s, simulated with these times), gradient sync %s, optimizer %s; "
              "bubble fraction %.3f; slowest stage %d (%s)\n",
              seconds_text(p.step_seconds).c_str(), seconds_text(p.simulation.makespan).c_str(),
              pipeline::schedule_kind_name(s.kind).c_str(), seconds_text(sync).c_str(), seconds_text(optimizer).c_str(),
              p.simulation.bubble_fraction, slowest->stage, seconds_text(slowest->pipeline_seconds).c_str());
  const auto sharing = train::core_sharing_of(r.job, r.links);
  if (sharing.oversubscribed(s.stages)) {
    std::printf("the %d ranks of %d threads share this host's %d cores: ops that run at once were slowed down in "
                "proportion\n", s.stages * sharing.replicas, sharing.threads_per_rank, sharing.cores);
  }
  if (std::any_of(p.stages.begin(), p.stages.end(), [](const auto& st) { return st.co_run_slowdown > 0.0; })) {
    std::string slowdowns;
    for (const auto& st : p.stages)
      slowdowns += (slowdowns.empty() ? "" : ", ") + std::to_string(st.stage) + ": " +
                   std::to_string(static_cast<int>(std::lround(st.co_run_slowdown * 100.0))) + "%";
    std::printf("beside the job's other ranks on this host (%d threads at once), the profiled layers ran slower by "
                "stage (%s); ops were slowed down by as many threads as ran beside them\n",
                sharing.co_run_threads, slowdowns.c_str());
  }
  for (const auto& st : p.stages) {
    if (!st.fits()) {
      std::printf("warning: stage %d needs %s, %s over its %s cap\n", st.stage, format_bytes(st.peak_bytes).c_str(),
                  format_bytes(st.peak_bytes - st.memory_cap).c_str(), format_bytes(st.memory_cap).c_str());
    }
  }
}

void print_comparison(const PlanReport& r) {
  const auto& s = r.job.schedule;
  std::printf("\nschedules on this layout (%d stages, %d micro-batches, recompute %s, partition %s):\n", s.stages,
              s.micro_batches, recompute_text(r.prediction.cost).c_str(), r.method.c_str());
  std::printf("%-15s %2s %11s %7s %7s %7s  %s\n", "schedule", "V", "step time", "bubble", "p2p/mb", "copies",
              "peak activations per stage (units held)");
  for (const auto& row : r.comparison) {
    const std::string name = pipeline::schedule_kind_name(row.kind);
    if (!row.unavailable.empty()) {
      std::printf("%-15s %2d  %s\n", name.c_str(), row.chunks, row.unavailable.c_str());
      continue;
    }
    std::string peaks;
    for (std::size_t i = 0; i < row.peak_held.size(); ++i) {
      peaks += (i == 0 ? "" : " | ") + format_bytes(row.peak_activation_bytes[i]) + " (" +
               std::to_string(row.peak_held[i]) + ")";
    }
    std::printf("%-15s %2d %11s %7.3f %7.2f %7d  %s\n", name.c_str(), row.chunks, seconds_text(row.step_seconds).c_str(),
                row.bubble_fraction, row.messages_per_micro_batch, row.parameter_copies, peaks.c_str());
  }
}

namespace {

nlohmann::json comparison_json(const PlanReport& r) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : r.comparison) {
    nlohmann::json j{{"schedule", pipeline::schedule_kind_name(row.kind)},
                     {"chunks", row.chunks},
                     {"available", row.unavailable.empty()}};
    if (!row.unavailable.empty()) {
      j["reason"] = row.unavailable;
    } else {
      j["step_seconds"] = row.step_seconds;
      j["bubble_fraction"] = row.bubble_fraction;
      j["peak_held"] = row.peak_held;
      j["peak_activation_bytes"] = row.peak_activation_bytes;
      j["messages_per_micro_batch"] = row.messages_per_micro_batch;
      j["parameter_copies"] = row.parameter_copies;
    }
    rows.push_back(std::move(j));
  }
  return rows;
}

}  // namespace

nlohmann::json plan_json(const PlanReport& r) {
  const auto& plan = r.job;
  const auto& p = r.prediction;
  const auto& s = plan.schedule;
  nlohmann::json j;
  j["model"] = plan.model.name;
  j["parameters"] = r.parameters;
  j["layers"] = plan.model.layer_count();
  j["sample_shape"] = plan.model.sample_shape;
  j["device"] = r.device.str();
  j["threads"] = r.threads;
  j["schedule"] = pipeline::schedule_kind_name(s.kind);
  j["stages"] = s.stages;
  j["chunks"] = s.chunks;
  j["micro_batches"] = s.micro_batches;
  j["micro_batch_size"] = train::micro_batch_size_of(plan);
  j["batch_size"] = plan.config.data.batch_size;
  j["replicas"] = plan.replicas();
  j["precision"] = enum_name(plan.precision);
  j["partition"] = r.method;
  j["recompute"] = partition::recompute_text(p.cost.recompute, p.cost.recompute_stages);
  j["recompute_layers"] = p.cost.recompute_layers;
  j["optimizer"] = enum_name(plan.optimizer.kind);
  j["optimizer_state"] = enum_name(plan.config.replicas.optimizer_state);
  j["optimizer_shards"] = p.cost.optimizer_shards;
  j["parameter_server_tables"] = plan.server_tables;
  const std::int64_t cap = p.cost.memory_cap(0);
  j["device_memory"] = cap > 0 ? nlohmann::json(cap) : nlohmann::json(nullptr);
  j["link_bandwidth_bytes_per_s"] = r.links.stage_bytes_per_s;
  j["link_latency_s"] = r.links.latency_s;
  j["replica_link_bytes_per_s"] = r.links.replica_bytes_per_s;
  j["replica_link_latency_s"] = r.links.replica_latency_s;
  j["replica_link_call_s"] = r.links.replica_call_s;
  j["host_cores"] = r.links.host_cores;
  j["cores_oversubscribed"] = train::core_sharing_of(r.job, r.links).oversubscribed(r.job.schedule.stages);
  j["busy_handoff_s"] = r.links.busy_handoff_s;
  j["split"] = nlohmann::json::array();
  for (const auto& e : p.pieces) {
    j["split"].push_back({{"stage", e.device},
                          {"chunk", e.chunk},
                          {"begin", e.range.begin},
                          {"end", e.range.end},
                          {"first_layer", e.layer_names.front()},
                          {"last_layer", e.layer_names.back()},
                          {"layer_names", e.layer_names},
                          {"parameters", e.parameters},
                          {"forward_seconds", e.forward_seconds},
                          {"backward_seconds", e.backward_seconds},
                          {"send_seconds", e.send_seconds},
                          {"step_seconds", e.step_seconds},
                          {"output_bytes", e.output_bytes},
                          {"weight_bytes", e.weight_bytes},
                          {"activation_bytes", e.activation_bytes},
                          {"input_bytes", e.input_bytes},
                          {"stash_bytes", e.stash_bytes},
                          {"weight_half_bytes", e.weight_half_bytes},
                          {"workspace_bytes", e.workspace_bytes},
                          {"memory_bytes", e.memory_bytes},
                          {"memory_cap", e.memory_cap},
                          {"fits", e.fits()}});
  }
  j["memory"] = nlohmann::json::array();
  for (const auto& st : p.stages) {
    j["memory"].push_back({{"stage", st.stage},
                           {"peak_bytes", st.peak_bytes},
                           {"other_replicas_peak_bytes", st.other_replicas_peak_bytes},
                           {"by_kind", by_kind_json(st.memory)},
                           {"memory_cap", st.memory_cap},
                           {"fits", st.fits()},
                           {"pipeline_seconds", st.pipeline_seconds},
                           {"gradient_sync_seconds", st.gradient_sync_seconds},
                           {"optimizer_seconds", st.optimizer_seconds},
                           {"co_run_slowdown", st.co_run_slowdown}});
  }
  j["fits"] = p.fits();
  j["step_seconds"] = p.simulation.makespan;   // the simulated pipeline, as --compare-schedules rows
  j["predicted_step_seconds"] = p.step_seconds;   // with the gradient collectives and the optimizer step
  j["bubble_fraction"] = p.simulation.bubble_fraction;
  j["stage_busy_fraction"] = p.simulation.stage_busy_fraction;
  if (!r.comparison.empty()) j["schedules"] = comparison_json(r);
  return j;
}

}  // namespace pw::tools
