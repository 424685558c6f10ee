#include "train/job_plan.h"

#include <cmath>
#include <cstdio>
#include <thread>
#include <tuple>

#include "core/log.h"
#include "core/units.h"
#include "kernels/runtime.h"
#include "kernels/cuda_probe.h"
#include "kernels/stream.h"
#include "models/data/dataset.h"
#include "partition/partitioners.h"
#include "partition/profiler.h"
#include "pipeline/planner.h"
#include "pipeline/schedule_file.h"
#include "train/parameter_servers.h"

namespace pw::train {
namespace {

models::data::ClickFeatures click_features(const JobConfig& c) {
  models::data::ClickFeatures clicks;
  for (auto rows : c.model.embedding_rows)
    PW_INPUT_CHECK(rows >= 1 && rows <= models::data::kMaxPackedId,
                   "--embedding-rows " << rows << ": expected 1 to " << models::data::kMaxPackedId
                                       << " rows per table (ids travel as exact F32 integers)");
  if (!c.model.embedding_rows.empty()) clicks.table_sizes = c.model.embedding_rows;
  models::data::check_click_features(clicks);
  return clicks;
}

}  // namespace

models::data::DatasetOptions dataset_options(const JobConfig& c, models::data::DataParts parts) {
  models::data::DatasetOptions d;
  d.fashion_mnist_dir = c.resources.data_dir;
  d.seed = c.seed;
  d.clicks = click_features(c);
  d.parts = parts;
  if (c.data.dataset == "synthetic" || c.data.dataset == "synthetic-clicks") d.synthetic_size = c.data.synthetic_size;
  if (c.data.dataset == "synthetic") d.synthetic_shape = c.data.synthetic_shape;
  d.data_dir = c.resources.data_dir;
  d.image_size = static_cast<int>(c.data.image_size);
  d.augment = c.data.augment;
  return d;
}

DataShape data_shape(const JobConfig& c) {
  const auto d = models::data::open_dataset(c.data.dataset, models::data::Split::Train,
                                            dataset_options(c, models::data::DataParts::None));
  return {d->name(), d->sample_shape(), d->num_classes()};
}

pipeline::ScheduleSpec schedule_of(const PipelineConfig& p, int model_split_pieces) {
  pipeline::ScheduleSpec s;
  s.kind = p.schedule;
  PW_INPUT_CHECK(p.chunks >= 0, "--chunks " << p.chunks << "; expected 1 or more");
  s.chunks = p.chunks > 0 ? p.chunks : (s.kind == pipeline::ScheduleKind::Interleaved ? 2 : 1);
  const int pieces = !p.split.empty() ? static_cast<int>(p.split.size()) + 1 : model_split_pieces;
  if (p.stages > 0) {
    s.stages = p.stages;
    PW_INPUT_CHECK(pieces == 0 || pieces == s.stages * s.chunks,
                   "--split " << partition::format_split_points(p.split) << " makes " << pieces << " pieces but --stages "
                              << s.stages << " x --chunks " << s.chunks << " needs " << s.stages * s.chunks);
  } else {
    PW_INPUT_CHECK(pieces % s.chunks == 0, "--split " << partition::format_split_points(p.split) << " makes " << pieces
                                                      << " pieces, not a multiple of --chunks " << s.chunks);
    s.stages = pieces > 0 ? pieces / s.chunks : 1;
  }
  s.micro_batches = p.micro_batches > 0 ? p.micro_batches : s.stages;
  validate(s);
  return s;
}

namespace {

void check_checkpoint_settings(const JobConfig& c) {
  const auto& k = c.checkpoints;
  PW_INPUT_CHECK(!k.dir.empty() || (k.every_steps == 0 && k.every_seconds == 0),
                 "--checkpoint-every" << (k.every_steps == 0 ? "-seconds" : "") << " needs --checkpoint-dir D");
}

bool has_parameter_servers(const JobConfig& c) { return c.ps.servers != 0 || !c.ps.addresses.empty(); }

// The model's tables on servers against the job's servers: each needs the other.
void check_server_tables(const JobConfig& c, const std::vector<std::string>& tables, const std::string& model) {
  if (has_parameter_servers(c)) {
    if (tables.empty())
      throw ConfigError(c.ps.servers != 0 ? "/ps/servers" : "/ps/addresses",
                        "parameter servers hold embedding tables, and model " + model +
                            " keeps none on them (use a model with such tables, e.g. dlrm or a program's "
                            "layers::embedding_bag with TablePlacement::ParameterServers, or give no servers)");
    return;
  }
  PW_INPUT_CHECK(!ps_table_bounds(c).any(), "--ps-admit-after, --ps-max-rows and --ps-row-ttl bound the tables on "
                                            "parameter servers; give --ps K or --ps-servers too");
  if (!tables.empty())
    throw ConfigError("/ps/servers", "model " + model + " keeps embedding table '" + tables.front() +
                                         "' on parameter servers; give the job servers (/ps/servers or /ps/addresses)");
}

}  // namespace

JobPlan plan_job(const JobConfig& c) {
  JobPlan plan;
  plan.config = c;
  validate(c);
  check_checkpoint_settings(c);
  const bool program_model = c.program_model && !c.program_model->layers.empty();
  PW_INPUT_CHECK(program_model || c.model.name != "dlrm" || c.data.dataset == "synthetic-clicks",
                 "--model dlrm reads click data; use --dataset synthetic-clicks (got " << c.data.dataset
                                                                                   << "); it accepts no other data set");
  plan.data = data_shape(c);
  plan.optimizer.kind = c.optimizer.kind;
  plan.optimizer.lr = effective_lr(c.optimizer);
  plan.optimizer.momentum = c.optimizer.momentum;
  plan.optimizer.weight_decay = c.optimizer.weight_decay;
  plan.buckets.bucket_bytes = static_cast<std::size_t>(c.replicas.bucket_bytes);
  plan.buckets.compression = c.replicas.grad_compression;
  plan.recompute = c.pipeline.recompute;
  plan.precision = c.numerics.precision;
  const bool fp16 = plan.precision == models::Precision::Fp16;
  PW_INPUT_CHECK(fp16 || (c.numerics.loss_scale == 0.0 && c.numerics.initial_loss_scale == 65536 &&
                          c.numerics.loss_scale_window == 2000),
                 "--loss-scale, --initial-loss-scale and --loss-scale-window apply to --precision fp16 only ("
                     << enum_name(c.numerics.precision) << " needs no loss scaling)");
  PW_INPUT_CHECK(std::isfinite(c.numerics.initial_loss_scale) && c.numerics.initial_loss_scale >= 1.0,
                 "--initial-loss-scale " << c.numerics.initial_loss_scale << "; expected at least 1");

  models::ModelSpec spec;
  if (program_model) {
    plan.model = *c.program_model;
    if (plan.model.sample_shape.empty()) plan.model.sample_shape = plan.data.sample_shape;
    if (plan.model.num_classes == 0) plan.model.num_classes = plan.data.num_classes;
    PW_INPUT_CHECK(plan.model.sample_shape == plan.data.sample_shape,
                   "model " << plan.model.name << " takes samples of " << kernels::shape_str(plan.model.sample_shape)
                            << " but " << plan.data.name << " has " << kernels::shape_str(plan.data.sample_shape));
    spec = {plan.model.name, plan.model.sample_shape, plan.model.num_classes, plan.model.layers,
            models::Objective::SoftmaxCrossEntropy};
    plan.server_tables = models::server_tables_of(plan.model.layers);
  } else {
    models::ModelOptions mo;
    mo.width = c.model.width;
    mo.sample_shape = plan.data.sample_shape;
    mo.num_classes = plan.data.num_classes;
    mo.seed = c.seed;
    mo.clicks = click_features(c);
    mo.embedding_dim = c.model.embedding_dim;
    if (has_parameter_servers(c)) mo.embedding_tables = models::TablePlacement::ParameterServers;
    spec = models::make_model_spec(c.model.name, mo);
    plan.model = partition::describe(spec);
    plan.server_tables = models::server_tables_of(plan.model.layers);
  }
  check_server_tables(c, plan.server_tables, plan.model.name);
  plan.objective = spec.objective;
  plan.stats = models::model_stats(spec);

  const int model_pieces = plan.model.split_points.empty() ? 0 : static_cast<int>(plan.model.split_points.size()) + 1;
  plan.schedule = schedule_of(c.pipeline, c.pipeline.split.empty() ? model_pieces : 0);
  partition::check_stage_count(plan.model.layer_count(), plan.schedule.stages * plan.schedule.chunks, plan.model.name);
  if (!c.pipeline.split.empty())
    partition::split_at(plan.model.layer_count(), c.pipeline.split, {"--split", plan.model.name});
  const std::int64_t replicas = c.replicas.replicas;
  PW_INPUT_CHECK(c.data.batch_size % replicas == 0, "--batch-size " << c.data.batch_size << " (the global batch) does "
                                                    "not split evenly over " << replicas << " replicas; use a multiple of "
                                                    << replicas);
  const std::int64_t local = c.data.batch_size / replicas;
  PW_INPUT_CHECK(local % plan.schedule.micro_batches == 0,
                 "--batch-size " << c.data.batch_size << (replicas > 1 ? " (" + std::to_string(local) + " per replica)" : "")
                                 << " does not split into " << plan.schedule.micro_batches
                                 << " equal micro-batches; use a batch size divisible by "
                                 << replicas * plan.schedule.micro_batches);
  if (!c.pipeline.schedule_file.empty()) {
    PW_INPUT_CHECK(plan.recompute == pipeline::RecomputeMode::None,
                   "--recompute " << enum_name(c.pipeline.recompute) << " with --schedule-file: a schedule file says where it "
                                  "recomputes with its own R instructions; leave out --recompute");
    plan.programs = pipeline::load_schedule_file(c.pipeline.schedule_file, plan.schedule);
  }
  return plan;
}

void check_devices(const JobConfig& c, int world_size) {
  // CUDA is asked only when a CUDA device is named, so a CPU job runs where CUDA is broken.
  if (!c.resources.devices.empty()) {
    const int replicas = c.replicas.replicas;
    PW_INPUT_CHECK(static_cast<int>(c.resources.devices.size()) == world_size,
                   "--devices lists " << c.resources.devices.size() << " devices for " << world_size / replicas
                                      << " stages"
                                      << (replicas > 1 ? " x " + std::to_string(replicas) + " replicas" : std::string())
                                      << "; give one per " << (replicas > 1 ? "rank (replica-major)" : "stage")
                                      << ", e.g. cpu:0,cpu:1");
    for (const auto& text : c.resources.devices) {
      const auto d = kernels::Device::parse(text);
      if (d.is_cpu()) continue;
      const int gpus = kernels::cuda_device_count();
      PW_INPUT_CHECK(d.index < gpus, "device " << d.str() << ": this machine has " << gpus << " CUDA device(s)"
                                               << (gpus == 0 ? "; use cpu:N devices" : ""));
    }
    return;
  }
  const auto base = kernels::Device::parse(c.resources.device);
  if (base.is_cpu()) return;
  const int gpus = kernels::cuda_device_count();
  PW_INPUT_CHECK(gpus > 0 && (world_size > 1 || base.index < gpus),
                 "--device " << c.resources.device << ": this machine has " << gpus << " CUDA device(s)"
                             << (gpus == 0 ? "; use --device cpu:0" : ""));
}

kernels::Device device_of_rank(const JobConfig& c, int rank, int world_size, WorldKind world, int local_rank) {
  if (!c.resources.devices.empty()) return kernels::Device::parse(c.resources.devices.at(static_cast<std::size_t>(rank)));
  const auto base = kernels::Device::parse(c.resources.device);
  // Ranks as processes: one CPU device each, or the host's GPUs in turn by local rank. Ranks as
  // threads: a world of one keeps the device it was given, more take cpu:0..N-1 or the GPUs in turn.
  if (world == WorldKind::Processes) {
    if (base.is_cpu()) return kernels::Device::cpu(0);
    return kernels::Device::cuda(local_rank % std::max(1, kernels::cuda_device_count()));
  }
  if (world_size == 1) return base;
  if (base.is_cpu()) return kernels::Device::cpu(rank);
  const int gpus = kernels::cuda_device_count();
  return kernels::Device::cuda(gpus > 0 ? rank % gpus : 0);
}

bool operator==(const JobPlan& a, const JobPlan& b) {
  const auto layer_names = [](const JobPlan& p) {
    std::vector<std::string> names;
    for (const auto& l : p.model.layers) names.push_back(l.name);
    return names;
  };
  const auto schedule = [](const JobPlan& p) {
    return std::tuple(p.schedule.kind, p.schedule.stages, p.schedule.micro_batches, p.schedule.chunks);
  };
  // to_full_json leaves out a program's model; to_json holds its identity (layers, ties, loss).
  return to_full_json(a.config) == to_full_json(b.config) && to_json(a.config) == to_json(b.config) &&
         layer_names(a) == layer_names(b) &&
         a.model.split_points == b.model.split_points && schedule(a) == schedule(b) &&
         (a.programs.empty() ? b.programs.empty()
                             : !b.programs.empty() && pipeline::schedule_file_text(a.schedule, a.programs) ==
                                                          pipeline::schedule_file_text(b.schedule, b.programs)) &&
         a.data.name == b.data.name && a.data.sample_shape == b.data.sample_shape &&
         a.data.num_classes == b.data.num_classes && a.server_tables == b.server_tables;
}

partition::Partition choose_split(const JobPlan& plan, kernels::Device profile_on) {
  const auto& c = plan.config;
  pipeline::SplitChoice choice;
  if (!c.pipeline.split.empty()) choice.split_points = c.pipeline.split;
  else if (!plan.model.split_points.empty()) choice.split_points = plan.model.split_points;
  else choice.method = c.pipeline.partition;
  partition::CostModel cost;
  cost.stages = plan.schedule.stages;
  cost.chunks = plan.schedule.chunks;
  cost.micro_batches = plan.schedule.micro_batches;
  cost.in_flight = pipeline::in_flight_of(plan.schedule.kind);
  cost.recompute = plan.recompute;
  cost.optimizer_state = partition::optimizer_state_tensors(plan.optimizer.kind);
  if (c.resources.device_memory > 0) cost.device_memory = {c.resources.device_memory};
  std::vector<partition::LayerProfile> profiles;
  if (choice.split_points.empty() && choice.method == partition::PartitionMethod::Profile) {
    partition::check_stage_count(plan.model.layer_count(), cost.pieces(), plan.model.name);
    log::outputf("profiling %d layers of %s on %s...", plan.model.layer_count(), plan.model.name.c_str(),
                 profile_on.str().c_str());
    profiles = partition::profile_layers(plan.model, profile_on,
                                         c.data.batch_size / plan.replicas() / plan.schedule.micro_batches, 3);
  }
  return pipeline::choose_partition(plan.model, choice, cost, profiles);
}

}  // namespace pw::train
