#include "tools/plan_command.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/units.h"
#include "kernels/runtime.h"
#include "kernels/cuda_probe.h"
#include "kernels/stream.h"
#include "models/data/dataset.h"
#include "models/optimizer.h"
#include "models/zoo/model_spec.h"
#include "partition/cost_model.h"
#include "partition/model_description.h"
#include "partition/partitioners.h"
#include "partition/profile_partitioner.h"
#include "partition/profiler.h"
#include "pipeline/schedule.h"
#include "pipeline/planner.h"
#include "pipeline/schedule_comparison.h"
#include "pipeline/simulator.h"
#include "tools/flag_checks.h"

namespace pw::tools {
namespace {

using partition::Partition;
using partition::StageEstimate;

struct Plan {
  partition::ModelDescription model;
  std::int64_t parameters = 0;
  kernels::Device device;
  int threads = 0;
  pipeline::ScheduleSpec schedule;
  std::int64_t batch_size = 0;
  std::int64_t micro_batch_size = 0;
  std::string method;   // "profile", "params", "uniform" or "split 3,7,12"
  partition::CostModel cost;
  std::string optimizer;
  Partition partition;
  std::vector<StageEstimate> pieces;
  std::vector<partition::DeviceEstimate> devices;
  pipeline::SimulationResult simulation;
  std::vector<pipeline::ScheduleComparison> comparison;   // --compare-schedules
};

constexpr double kCpuLinkBytesPerSecond = 10e9;    // in-process copies: about memory bandwidth
constexpr double kCudaLinkBytesPerSecond = 25e9;   // GPU to GPU over PCIe 4.0 x16

kernels::Shape sample_shape_of(const PlanOptions& o) {
  if (o.dataset == "fashion-mnist") return {1, 28, 28};
  if (o.dataset == "synthetic") return models::data::parse_sample_shape(o.synthetic_shape);
  throw InputError("unknown data set '" + o.dataset + "'; accepted: fashion-mnist, synthetic");
}

kernels::Device device_of(const PlanOptions& o) {
  const auto device = kernels::Device::parse(o.device);
  if (device.is_cuda()) {
    const int n = kernels::cuda_device_count();
    PW_INPUT_CHECK(device.index < n, "--device " << o.device << ": this machine has " << n << " CUDA device(s)"
                                                 << (n == 0 ? "; use --device cpu:0" : ""));
  }
  return device;
}

// Resolves --stages / --chunks / --micro-batches defaults against --split and the schedule.
pipeline::ScheduleSpec schedule_of(const PlanOptions& o, const std::vector<int>& split_points) {
  pipeline::ScheduleSpec s;
  s.kind = pipeline::parse_schedule_kind(o.schedule);
  PW_INPUT_CHECK(o.chunks >= 0, "--chunks " << o.chunks << ": need at least 1 model chunk per stage");
  s.chunks = o.chunks > 0 ? o.chunks : pipeline::default_chunks(s.kind);
  const int split_pieces = static_cast<int>(split_points.size()) + 1;
  if (!o.stages_given && !o.split.empty()) {
    PW_INPUT_CHECK(split_pieces % s.chunks == 0, "--split " << o.split << " makes " << split_pieces
                                                            << " pieces, not a multiple of the " << s.chunks
                                                            << " chunks per stage");
    s.stages = split_pieces / s.chunks;
  } else {
    s.stages = o.stages_given ? o.stages : 1;
  }
  PW_INPUT_CHECK(s.stages >= 1, "--stages " << o.stages << ": need at least 1 stage");
  PW_INPUT_CHECK(o.split.empty() || split_pieces == s.stages * s.chunks,
                 "--split " << o.split << " makes " << split_pieces << " pieces but --stages " << s.stages
                            << (s.chunks > 1 ? " x --chunks " + std::to_string(s.chunks) : std::string())
                            << " needs " << s.stages * s.chunks);
  s.micro_batches = o.micro_batches_given ? o.micro_batches : s.stages;
  pipeline::validate(s);
  return s;
}

Plan make_plan(const PlanOptions& o) {
  Plan plan;
  plan.device = device_of(o);
  models::ModelOptions mo;
  mo.width = o.width;
  mo.sample_shape = sample_shape_of(o);
  mo.num_classes = 10;
  mo.seed = o.seed;
  plan.model = partition::describe(models::make_model_spec(o.model, mo));
  std::vector<int> split_points;
  try {
    if (!o.split.empty()) split_points = partition::parse_split_points(o.split);
  } catch (const InputError& e) {
    throw InputError(std::string("--split: ") + e.what());
  }
  if (o.split.empty()) partition::parse_partition_method(o.partition);
  plan.schedule = schedule_of(o, split_points);
  // Fail on a bad split or too many stages before the (slow) profiling.
  const int layers = plan.model.layer_count();
  const int V = plan.schedule.chunks;
  if (!o.split.empty()) partition::split_at(layers, split_points, {"--split", plan.model.name});
  PW_INPUT_CHECK(plan.schedule.stages * V <= layers,
                 "--stages " << plan.schedule.stages << (V > 1 ? " x " + std::to_string(V) + " chunks" : std::string())
                             << ": " << plan.model.name << " has only " << layers << " layers, so at most "
                             << layers / V << " stages" << (V > 1 ? " of that many chunks" : ""));
  const int M = plan.schedule.micro_batches;
  PW_INPUT_CHECK(o.batch_size >= M && o.batch_size % M == 0,
                 "--batch-size " << o.batch_size << " does not split into " << M
                                 << " equal micro-batches; use a multiple of --micro-batches");
  PW_INPUT_CHECK(o.repeats >= 1, "--repeats " << o.repeats << ": need at least 1");
  plan.batch_size = o.batch_size;
  plan.micro_batch_size = o.batch_size / M;

  auto& cost = plan.cost;
  cost.stages = plan.schedule.stages;
  cost.chunks = plan.schedule.chunks;
  cost.placement = pipeline::chunk_placement(plan.schedule.kind);
  cost.micro_batches = M;
  cost.in_flight = pipeline::in_flight_of(plan.schedule.kind);
  cost.recompute = partition::parse_recompute(o.recompute);
  plan.optimizer = models::optimizer_kind_name(models::parse_optimizer_kind(o.optimizer));
  cost.optimizer_state = partition::optimizer_state_tensors(models::parse_optimizer_kind(o.optimizer));
  if (o.optimizer_state == dp::OptimizerState::Sharded) cost.optimizer_shards = o.replicas;
  if (!o.device_memory.empty()) {
    cost.device_memory = {parse_bytes(o.device_memory)};
    PW_INPUT_CHECK(cost.device_memory.front() > 0, "--device-memory " << o.device_memory << ": need a positive size");
  }
  cost.link.bandwidth_bytes_per_s = plan.device.is_cuda() ? kCudaLinkBytesPerSecond : kCpuLinkBytesPerSecond;
  if (!o.link_bandwidth.empty()) {
    cost.link.bandwidth_bytes_per_s = static_cast<double>(parse_bytes(o.link_bandwidth));
    PW_INPUT_CHECK(cost.link.bandwidth_bytes_per_s > 0, "--link-bandwidth " << o.link_bandwidth << ": need a positive rate");
  }
  plan.method = o.split.empty() ? o.partition : "split " + o.split;

  auto& runtime = kernels::DeviceRuntime::get(plan.device);
  if (o.threads > 0) runtime.set_threads(o.threads);
  plan.threads = runtime.threads();
  if (!o.json) {
    std::fprintf(stderr, "profiling %d layers of %s on %s (micro-batch %lld, %d repeats)...\n", plan.model.layer_count(),
                 plan.model.name.c_str(), plan.device.str().c_str(), static_cast<long long>(plan.micro_batch_size), o.repeats);
  }
  partition::ProfileOptions po;
  po.micro_batch_size = plan.micro_batch_size;
  po.repeats = o.repeats;
  po.seed = o.seed;
  const auto profiles = partition::profile_layers(plan.model, plan.device, po);
  for (const auto& p : profiles) plan.parameters += p.parameters;

  pipeline::SplitChoice choice;
  choice.split_points = split_points;
  if (o.split.empty()) choice.method = partition::parse_partition_method(o.partition);
  plan.partition = pipeline::choose_partition(plan.model, choice, cost, profiles);
  plan.pieces = partition::estimate_stages(profiles, cost, plan.partition);
  plan.devices = partition::per_device(plan.pieces, cost);
  plan.simulation = pipeline::simulate(plan.schedule, pipeline::op_times(plan.schedule, plan.pieces));
  if (o.compare_schedules) {
    const bool interleaved = plan.schedule.kind == pipeline::ScheduleKind::Interleaved ||
                             plan.schedule.kind == pipeline::ScheduleKind::InterleavedZeroBubble;
    const int interleaved_chunks = interleaved ? plan.schedule.chunks : std::max(o.chunks, 2);
    plan.comparison = pipeline::compare_schedules(plan.model, profiles, cost, choice, interleaved_chunks);
  }
  return plan;
}

std::string seconds_text(double s) {
  char buf[32];
  if (s >= 1.0) std::snprintf(buf, sizeof buf, "%.3f s", s);
  else if (s >= 1e-3) std::snprintf(buf, sizeof buf, "%.2f ms", s * 1e3);
  else std::snprintf(buf, sizeof buf, "%.1f us", s * 1e6);
  return buf;
}

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

std::string stage_label(const StageEstimate& e, int chunks) {
  return chunks > 1 ? std::to_string(e.device) + "." + std::to_string(e.chunk) : std::to_string(e.device);
}

void print_text(const Plan& plan) {
  const auto& s = plan.schedule;
  std::printf("plan: %s (%s parameters, %d layers, samples %s) on %s with %d threads\n", plan.model.name.c_str(),
              count_text(plan.parameters).c_str(), plan.model.layer_count(), shape_text(plan.model.sample_shape).c_str(),
              plan.device.str().c_str(), plan.threads);
  std::printf("schedule %s, %d stages%s, %d micro-batches of %lld (batch %lld), %s, recompute %s, partition %s\n",
              pipeline::schedule_kind_name(s.kind).c_str(), s.stages,
              s.chunks > 1 ? (" x " + std::to_string(s.chunks) + " chunks").c_str() : "", s.micro_batches,
              static_cast<long long>(plan.micro_batch_size), static_cast<long long>(plan.batch_size),
              (plan.optimizer + (plan.cost.optimizer_shards > 1
                                     ? " (state sharded over " + std::to_string(plan.cost.optimizer_shards) + " replicas)"
                                     : std::string())).c_str(),
              partition::recompute_name(plan.cost.recompute).c_str(), plan.method.c_str());
  const std::int64_t cap = plan.cost.memory_cap(0);
  std::printf("memory cap %s per device, link %.1f GB/s\n\n", cap > 0 ? format_bytes(cap).c_str() : "none",
              plan.cost.link.bandwidth_bytes_per_s / 1e9);
  std::printf("%-6s %-12s %-32s %12s %11s %11s %11s  %s\n", "stage", "layers", "first .. last", "params", "F+B / mb",
              "send / mb", "step time", "memory");
  for (const auto& e : plan.pieces) {
    const std::string range = std::to_string(e.range.begin) + "-" + std::to_string(e.range.end - 1) + " (" +
                              std::to_string(e.range.size()) + ")";
    const std::string names = e.layer_names.front() + " .. " + e.layer_names.back();
    std::string memory = format_bytes(e.memory_bytes);
    if (e.memory_cap > 0) memory += " of " + format_bytes(e.memory_cap) + (e.fits() ? "" : "  OVER");
    std::printf("%-6s %-12s %-32s %12s %11s %11s %11s  %s\n", stage_label(e, s.chunks).c_str(), range.c_str(), names.c_str(),
                count_text(e.parameters).c_str(), seconds_text(e.forward_seconds + e.backward_seconds).c_str(),
                seconds_text(e.send_seconds).c_str(), seconds_text(e.step_seconds).c_str(), memory.c_str());
  }
  if (s.chunks > 1) {
    for (const auto& d : plan.devices) {
      std::printf("device stage %d: step time %s, memory %s\n", d.device, seconds_text(d.step_seconds).c_str(),
                  format_bytes(d.memory_bytes).c_str());
    }
  }
  for (const auto& tied : plan.model.tied) {
    std::printf("tied weight %s on stages", tied.name.c_str());
    for (const int stage : partition::tied_stages(plan.model, plan.partition, tied)) std::printf(" %d", stage % s.stages);
    std::printf("\n");
  }
  const auto slowest = std::max_element(plan.devices.begin(), plan.devices.end(),
                                        [](const auto& a, const auto& b) { return a.step_seconds < b.step_seconds; });
  std::printf("\npredicted step time %s (%s, simulated with these times), bubble fraction %.3f; slowest stage %d (%s)\n",
              seconds_text(plan.simulation.makespan).c_str(), pipeline::schedule_kind_name(s.kind).c_str(),
              plan.simulation.bubble_fraction, slowest->device, seconds_text(slowest->step_seconds).c_str());
  for (const auto& d : plan.devices) {
    if (!d.fits()) {
      std::printf("warning: stage %d needs %s, %s over its %s cap\n", d.device, format_bytes(d.memory_bytes).c_str(),
                  format_bytes(d.memory_bytes - d.memory_cap).c_str(), format_bytes(d.memory_cap).c_str());
    }
  }
}

void print_comparison(const Plan& plan) {
  const auto& s = plan.schedule;
  std::printf("\nschedules on this layout (%d stages, %d micro-batches, recompute %s, partition %s):\n", s.stages,
              s.micro_batches, partition::recompute_name(plan.cost.recompute).c_str(), plan.method.c_str());
  std::printf("%-15s %2s %11s %7s %7s %7s  %s\n", "schedule", "V", "step time", "bubble", "p2p/mb", "copies",
              "peak activations per stage (units held)");
  for (const auto& row : plan.comparison) {
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

nlohmann::json comparison_json(const Plan& plan) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : plan.comparison) {
    nlohmann::json r{{"schedule", pipeline::schedule_kind_name(row.kind)},
                     {"chunks", row.chunks},
                     {"available", row.unavailable.empty()}};
    if (!row.unavailable.empty()) {
      r["reason"] = row.unavailable;
    } else {
      r["step_seconds"] = row.step_seconds;
      r["bubble_fraction"] = row.bubble_fraction;
      r["peak_held"] = row.peak_held;
      r["peak_activation_bytes"] = row.peak_activation_bytes;
      r["messages_per_micro_batch"] = row.messages_per_micro_batch;
      r["parameter_copies"] = row.parameter_copies;
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

nlohmann::json to_json(const Plan& plan) {
  const auto& s = plan.schedule;
  nlohmann::json j;
  j["model"] = plan.model.name;
  j["parameters"] = plan.parameters;
  j["layers"] = plan.model.layer_count();
  j["sample_shape"] = plan.model.sample_shape;
  j["device"] = plan.device.str();
  j["threads"] = plan.threads;
  j["schedule"] = pipeline::schedule_kind_name(s.kind);
  j["stages"] = s.stages;
  j["chunks"] = s.chunks;
  j["micro_batches"] = s.micro_batches;
  j["micro_batch_size"] = plan.micro_batch_size;
  j["batch_size"] = plan.batch_size;
  j["partition"] = plan.method;
  j["recompute"] = partition::recompute_name(plan.cost.recompute);
  j["optimizer"] = plan.optimizer;
  j["optimizer_shards"] = plan.cost.optimizer_shards;
  const std::int64_t cap = plan.cost.memory_cap(0);
  j["device_memory"] = cap > 0 ? nlohmann::json(cap) : nlohmann::json(nullptr);
  j["link_bandwidth_bytes_per_s"] = plan.cost.link.bandwidth_bytes_per_s;
  j["split"] = nlohmann::json::array();
  for (const auto& e : plan.pieces) {
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
                          {"memory_bytes", e.memory_bytes},
                          {"memory_cap", e.memory_cap},
                          {"fits", e.fits()}});
  }
  bool fits = true;
  for (const auto& d : plan.devices) fits = fits && d.fits();
  j["fits"] = fits;
  j["step_seconds"] = plan.simulation.makespan;
  j["bubble_fraction"] = plan.simulation.bubble_fraction;
  j["stage_busy_fraction"] = plan.simulation.stage_busy_fraction;
  if (!plan.comparison.empty()) j["schedules"] = comparison_json(plan);
  return j;
}

}  // namespace

void add_plan_command(CLI::App& app, PlanOptions& o) {
  auto* cmd = app.add_subcommand("plan", "split a model into pipeline stages and predict step time and memory");
  cmd->add_option("--model", o.model, "seed-cnn, resnet18/34/50/101/152, vgg16")->capture_default_str();
  cmd->add_option("--width", o.width, "ResNet base width / VGG width scale (64 = standard)")->capture_default_str()->check(Positive);
  cmd->add_option("--dataset", o.dataset, "fashion-mnist or synthetic (sets the sample shape)")->capture_default_str();
  cmd->add_option("--synthetic-shape", o.synthetic_shape, "CxHxW of synthetic samples")->capture_default_str();
  auto* stages = cmd->add_option("--stages", o.stages, "pipeline stages P (default: from --split, else 1)")
                     ->check(range(1, 4096));
  auto* micro_batches = cmd->add_option("--micro-batches", o.micro_batches, "micro-batches M per mini-batch (default: P)")
                            ->check(range(1, 1 << 20));
  cmd->add_option("--batch-size", o.batch_size, "mini-batch size, split into M equal micro-batches")->capture_default_str()
      ->check(range(1, 1 << 24));
  cmd->add_option("--schedule", o.schedule, "gpipe, 1f1b, interleaved, zb-h1, zb-h2, zb-v, v-half, v-min, interleaved-zb or dualpipev")->capture_default_str();
  cmd->add_option("--chunks", o.chunks, "model chunks per stage V (interleaved; default 2)")->check(range(1, 64));
  cmd->add_option("--device", o.device, "device the layers are profiled on, cpu:N or cuda:N")->capture_default_str();
  cmd->add_option("--threads", o.threads, "threads of the CPU device (default: all)")->check(Positive);
  cmd->add_option("--device-memory", o.device_memory, "memory cap of each stage's device, e.g. 1GiB (default: none)");
  auto* method = cmd->add_option("--partition", o.partition, "uniform, params or profile")->capture_default_str();
  auto* split = cmd->add_option("--split", o.split, "explicit split points: first layer of stages 1..P-1, e.g. 3,7,12");
  method->excludes(split);
  cmd->add_option("--recompute", o.recompute, "none, all or except-last")->capture_default_str();
  cmd->add_option("--optimizer", o.optimizer, "sgd, adam or adagrad (optimizer state memory)")->capture_default_str();
  cmd->add_option("--replicas", o.replicas, "data-parallel replicas of the pipeline (each replica's stages hold what "
                                            "the plan shows; with --shard-optimizer they share the optimizer state)")
      ->capture_default_str()->check(range(1, 4096));
  cmd->add_flag_callback("--shard-optimizer", [&o] { o.optimizer_state = dp::OptimizerState::Sharded; },
                         "each replica holds the optimizer state of 1/--replicas of every stage's parameters");
  cmd->add_option("--link-bandwidth", o.link_bandwidth, "bytes per second between stages, e.g. 10GB (default: 10GB on CPU, 25GB on CUDA)");
  cmd->add_option("--repeats", o.repeats, "timed runs per layer after one warm-up")->capture_default_str()
      ->check(range(1, 1000));
  cmd->add_option("--seed", o.seed, "seed of weights and profiling inputs")->capture_default_str();
  cmd->add_flag("--json", o.json, "print the plan as one JSON object");
  cmd->add_flag("--grid", o.grid, "also print the schedule's step x stage grid (equal op times)");
  cmd->add_flag("--compare-schedules", o.compare_schedules,
                "also simulate every schedule kind on this layout: step time, bubble, peak activations, messages");
  cmd->callback([&o, stages, micro_batches] {
    o.stages_given = stages->count() > 0;
    o.micro_batches_given = micro_batches->count() > 0;
    std::exit(run_plan(o));
  });
}

int run_plan(const PlanOptions& o) {
  // Each named value is checked up front, so its one-line error names the flag it came from.
  const auto as_flag = [](const char* flag, const auto& check) {
    try {
      check();
    } catch (const InputError& e) {
      throw InputError(std::string(flag) + ": " + e.what());
    }
  };
  as_flag("--model", [&] {
    const auto names = models::model_names();
    if (std::find(names.begin(), names.end(), o.model) != names.end()) return;
    std::string accepted;
    for (const auto& n : names) accepted += (accepted.empty() ? "" : ", ") + n;
    throw InputError("unknown model '" + o.model + "'; accepted: " + accepted);
  });
  as_flag("--dataset", [&] { sample_shape_of(o); });
  as_flag("--device", [&] { kernels::Device::parse(o.device); });
  as_flag("--schedule", [&] { pipeline::parse_schedule_kind(o.schedule); });
  if (o.split.empty()) as_flag("--partition", [&] { partition::parse_partition_method(o.partition); });
  as_flag("--recompute", [&] { partition::parse_recompute(o.recompute); });
  as_flag("--optimizer", [&] { models::parse_optimizer_kind(o.optimizer); });
  const Plan plan = make_plan(o);
  if (o.json) {
    std::printf("%s\n", to_json(plan).dump(2).c_str());
  } else {
    print_text(plan);
    if (o.compare_schedules) print_comparison(plan);
    if (o.grid) std::printf("\n%s", pipeline::format_grid(plan.schedule).c_str());
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace pw::tools
