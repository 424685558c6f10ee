#include "train/job_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <thread>
#include <tuple>

#include "core/host_memory.h"
#include "core/log.h"
#include "core/units.h"
#include "kernels/runtime.h"
#include "kernels/cuda_probe.h"
#include "kernels/stream.h"
#include "models/data/dataset.h"
#include "models/data/dataset_names.h"
#include "partition/partitioners.h"
#include "partition/profiler.h"
#include "pipeline/planner.h"
#include "pipeline/schedule_file.h"
#include "train/memory_bounds.h"
#include "train/parameter_servers.h"

namespace pw::train {
namespace {

models::data::ClickFeatures click_features(const JobConfig& c) {
  models::data::ClickFeatures clicks;
  for (std::size_t i = 0; i < c.model.embedding_rows.size(); ++i) {
    const auto rows = c.model.embedding_rows[i];
    if (rows < 1 || rows > models::data::kMaxPackedId)
      throw ConfigError("/model/embedding_rows/" + std::to_string(i),
                        std::to_string(rows) + "; expected 1 to " + std::to_string(models::data::kMaxPackedId) +
                            " rows per table (ids travel as exact F32 integers)");
  }
  const bool dlrm = c.model.name == "dlrm" && !(c.program_model && !c.program_model->layers.empty());
  if (dlrm && static_cast<std::int64_t>(c.model.embedding_rows.size()) > models::kMaxDlrmTables)
    throw ConfigError("/model/embedding_rows",
                      std::to_string(c.model.embedding_rows.size()) + " tables; at most " +
                          std::to_string(models::kMaxDlrmTables) + " (dlrm's interaction is a value for each pair of "
                          "tables: " + std::to_string(models::dlrm_interaction_width(
                                           static_cast<std::int64_t>(c.model.embedding_rows.size()) + 1,
                                           c.model.embedding_dim)) + " values wide, more than a layer's width can be)");
  if (!c.model.embedding_rows.empty()) clicks.table_sizes = c.model.embedding_rows;
  models::data::check_click_features(clicks);
  return clicks;
}

// A split given in the config, or the model's own.
const char* split_path(const PipelineConfig& p) { return p.split.empty() ? "/pipeline/stages" : "/pipeline/split"; }
std::string split_text(const PipelineConfig& p, int pieces) {
  return (p.split.empty() ? std::string("the model's own split points make ")
                          : partition::format_split_points(p.split) + " makes ") + std::to_string(pieces);
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
  d.bad_samples = c.data.bad_samples;
  d.normalization = c.data.normalize;
  return d;
}

std::unique_ptr<models::data::Dataset> open_job_dataset(const JobConfig& c, models::data::Split split,
                                                        models::data::DataParts parts,
                                                        const std::shared_ptr<models::data::BadSampleLog>& bad_samples) {
  if (!c.program_data) {
    auto options = dataset_options(c, parts);
    options.bad_sample_log = bad_samples;
    return models::data::open_dataset(c.data.dataset, split, options);
  }
  const auto& program = *c.program_data;
  const char* which = split == models::data::Split::Train ? "training" : "test";
  if (program.name.empty() || !program.open)
    throw ConfigError("/data/dataset", "a program's own data set needs a name and an open function");
  auto set = program.open(split);
  if (!set) throw ConfigError("/data/dataset", program.name + ": the program's data set gave no " + which + " split");
  const auto shape = set->sample_shape();
  if (shape.size() != 3 || shape[0] < 1 || shape[1] < 1 || shape[2] < 1 || set->num_classes() < 1 || set->size() < 0)
    throw ConfigError("/data/dataset", program.name + ": " + which + " split of " + std::to_string(set->size()) +
                                           " samples of shape " + kernels::shape_str(shape) + " in " +
                                           std::to_string(set->num_classes()) +
                                           " classes; expected {C, H, W} of at least 1 each and 1 or more classes");
  return set;
}

DataShape data_shape(const JobConfig& c) {
  const auto d = open_job_dataset(c, models::data::Split::Train, models::data::DataParts::None);
  return {d->name(), d->sample_shape(), d->num_classes()};
}

pipeline::ScheduleSpec schedule_of(const PipelineConfig& p, int model_split_pieces) {
  pipeline::ScheduleSpec s;
  s.kind = p.schedule;
  if (p.chunks < 0) throw ConfigError("/pipeline/chunks", std::to_string(p.chunks) + "; expected 1 or more");
  s.chunks = p.chunks > 0 ? p.chunks : pipeline::default_chunks(s.kind);
  const int pieces = !p.split.empty() ? static_cast<int>(p.split.size()) + 1 : model_split_pieces;
  if (p.stages > 0) {
    s.stages = p.stages;
    if (pieces != 0 && pieces != s.stages * s.chunks)
      throw ConfigError(split_path(p), split_text(p, pieces) + " pieces but /pipeline/stages " +
                                               std::to_string(s.stages) + " x /pipeline/chunks " +
                                               std::to_string(s.chunks) + " needs " + std::to_string(s.stages * s.chunks));
  } else {
    if (pieces % s.chunks != 0)
      throw ConfigError(split_path(p), split_text(p, pieces) + " pieces, not a multiple of /pipeline/chunks " +
                                               std::to_string(s.chunks));
    s.stages = pieces > 0 ? pieces / s.chunks : 1;
  }
  s.micro_batches = p.micro_batches > 0 ? p.micro_batches : s.stages;
  validate(s);
  return s;
}

namespace {

void check_checkpoint_settings(const JobConfig& c) {
  const auto& k = c.checkpoints;
  if (k.dir.empty() && (k.every_steps != 0 || k.every_seconds != 0))
    throw ConfigError(k.every_steps != 0 ? "/checkpoints/every_steps" : "/checkpoints/every_seconds",
                      "needs /checkpoints/dir D");
}

bool has_parameter_servers(const JobConfig& c) { return c.ps.servers != 0 || !c.ps.addresses.empty(); }

// The model's tables on servers against the job's servers: each needs the other.
void check_server_tables(const JobConfig& c, const std::vector<std::string>& tables, const std::string& model) {
  const auto& o = c.ps;
  if (has_parameter_servers(c)) {
    if (tables.empty())
      throw ConfigError(o.servers != 0 ? "/ps/servers" : "/ps/addresses",
                        "parameter servers hold embedding tables, and model " + model +
                            " keeps none on them (use a model with such tables, e.g. dlrm or a program's "
                            "layers::embedding_bag with TablePlacement::ParameterServers, or give no servers)");
    if (o.mode == dp::UpdateMode::Bounded && o.staleness < 1)
      throw ConfigError("/ps/staleness", std::to_string(o.staleness) + "; bounded staleness needs 1 or more (a pull "
                                         "of step t waits for step t - s; with s = 0 a worker would wait for its own "
                                         "push)");
    return;
  }
  if (ps_table_bounds(c).any())
    throw ConfigError(o.admit_after != 1 ? "/ps/admit_after" : o.max_rows != 0 ? "/ps/max_rows" : "/ps/row_ttl",
                      "bounds the tables on parameter servers; give /ps/servers or /ps/addresses too");
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
  if (!program_model && c.model.name == "dlrm" && c.data.dataset != "synthetic-clicks")
    throw ConfigError("/data/dataset", c.data.dataset + ": /model/name dlrm reads click data; use synthetic-clicks, "
                                       "it accepts no other data set");
  // Names first, so that a bad one is refused by its field (the CLI names the flag).
  const auto known = [](const std::vector<std::string>& names, const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  const auto listed = [](const std::vector<std::string>& names) {
    std::string out;
    for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
    return out;
  };
  if (!c.program_data && !known(models::data::dataset_names(), c.data.dataset))
    throw ConfigError("/data/dataset", "unknown data set '" + c.data.dataset + "'; accepted: " +
                                           listed(models::data::dataset_names()));
  if (!c.program_model && !known(models::model_names(), c.model.name))
    throw ConfigError("/model/name", "unknown model '" + c.model.name + "'; accepted: " + listed(models::model_names()));
  plan.data = data_shape(c);
  plan.optimizer.kind = c.optimizer.kind;
  plan.optimizer.lr = effective_lr(c.optimizer);
  plan.optimizer.momentum = c.optimizer.momentum;
  plan.optimizer.weight_decay = c.optimizer.weight_decay;
  plan.optimizer.offload = c.optimizer.offload;
  plan.buckets.bucket_bytes = static_cast<std::size_t>(c.replicas.bucket_bytes);
  plan.buckets.compression = c.replicas.grad_compression;
  plan.buckets.optimizer_state = c.replicas.optimizer_state;
  plan.buckets.masters = c.optimizer.offload;
  plan.recompute = c.pipeline.recompute;
  plan.recompute_stages = c.pipeline.recompute_stages;
  plan.precision = c.numerics.precision;
  const bool fp16 = plan.precision == models::Precision::Fp16;
  if (!fp16 && (c.numerics.loss_scale != 0.0 || c.numerics.initial_loss_scale != 65536 ||
                c.numerics.loss_scale_window != 2000))
    throw ConfigError(c.numerics.loss_scale != 0.0            ? "/numerics/loss_scale"
                      : c.numerics.initial_loss_scale != 65536 ? "/numerics/initial_loss_scale"
                                                               : "/numerics/loss_scale_window",
                      "applies to /numerics/precision fp16 only (" + std::string(enum_name(c.numerics.precision)) +
                          " needs no loss scaling)");
  if (!std::isfinite(c.numerics.initial_loss_scale) || c.numerics.initial_loss_scale < 1.0)
    throw ConfigError("/numerics/initial_loss_scale",
                      nlohmann::json(c.numerics.initial_loss_scale).dump() + "; expected at least 1");

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

  const int model_pieces = plan.model.split_points.empty() ? 0 : static_cast<int>(plan.model.split_points.size()) + 1;
  plan.schedule = schedule_of(c.pipeline, c.pipeline.split.empty() ? model_pieces : 0);
  try {
    partition::check_stage_count(plan.model.layer_count(), plan.schedule.stages * plan.schedule.chunks, plan.model.name);
  } catch (const InputError& e) {
    throw ConfigError("/pipeline/stages", e.what());
  }
  if (!c.pipeline.recompute_stages.empty() &&
      static_cast<int>(c.pipeline.recompute_stages.size()) != plan.schedule.stages)
    throw ConfigError("/pipeline/recompute",
                      std::to_string(c.pipeline.recompute_stages.size()) + " entries for " +
                          std::to_string(plan.schedule.stages) + " stages; expected one entry per stage (each none " +
                          "or all), or one of " + enum_choices<partition::Recompute>() + " for every stage");
  for (std::size_t i = 0; i < c.pipeline.recompute_layers.size(); ++i) {
    const auto& name = c.pipeline.recompute_layers[i];
    try {
      partition::layer_index(plan.model, name);
    } catch (const InputError& e) {
      throw ConfigError("/pipeline/recompute_layers/" + std::to_string(i), e.what());
    }
    plan.recompute_layers.insert(name);
  }
  if (!c.pipeline.split.empty()) {
    try {
      partition::split_at(plan.model.layer_count(), c.pipeline.split, {"", plan.model.name});
    } catch (const InputError& e) {
      throw ConfigError("/pipeline/split", e.what());
    }
  }
  // Weights, gradients and optimizer state from the layers' counts, before any layer is built (the
  // statistics below build each layer once).
  const HostMemory host = host_memory_limit(host_memory_bytes());
  check_model_memory(plan, host);
  plan.stats = models::model_stats(spec);
  const std::int64_t replicas = c.replicas.replicas;
  const std::string batch = std::to_string(c.data.batch_size);
  if (c.data.batch_size % replicas != 0)
    throw ConfigError("/data/batch_size", batch + " (the global batch) does not split evenly over " +
                                              std::to_string(replicas) + " replicas; use a multiple of " +
                                              std::to_string(replicas));
  const std::int64_t local = c.data.batch_size / replicas;
  if (local % plan.schedule.micro_batches != 0)
    throw ConfigError("/data/batch_size", batch + (replicas > 1 ? " (" + std::to_string(local) + " per replica)" : "") +
                                              " does not split into " + std::to_string(plan.schedule.micro_batches) +
                                              " equal micro-batches; use a batch size divisible by " +
                                              std::to_string(replicas * plan.schedule.micro_batches));
  if (!c.pipeline.schedule_file.empty()) {
    if (plan.recompute != pipeline::RecomputeMode::None || !plan.recompute_stages.empty())
      throw ConfigError("/pipeline/recompute", partition::recompute_text(c.pipeline.recompute, c.pipeline.recompute_stages) +
                                                   " with /pipeline/schedule_file: a schedule file says where it "
                                                   "recomputes with its own R instructions; leave out /pipeline/recompute");
    plan.programs = pipeline::load_schedule_file(c.pipeline.schedule_file, plan.schedule);
  }
  check_host_memory(plan, host);
  return plan;
}

void check_devices(const JobConfig& c, int world_size) {
  // CUDA is asked only when a CUDA device is named, so a CPU job runs where CUDA is broken.
  const auto& devices = c.resources.devices;
  if (!devices.empty()) {
    const int replicas = c.replicas.replicas;
    if (static_cast<int>(devices.size()) != world_size)
      throw ConfigError("/resources/devices",
                        std::to_string(devices.size()) + " devices for " + std::to_string(world_size / replicas) +
                            " stages" + (replicas > 1 ? " x " + std::to_string(replicas) + " replicas" : std::string()) +
                            "; give one per " + (replicas > 1 ? "rank (replica-major)" : "stage") + ", e.g. cpu:0,cpu:1");
    for (std::size_t i = 0; i < devices.size(); ++i) {
      if (devices[i].is_cpu()) continue;
      const int gpus = kernels::cuda_device_count();
      if (devices[i].index >= gpus)
        throw ConfigError("/resources/devices/" + std::to_string(i),
                          devices[i].str() + ": this machine has " + std::to_string(gpus) + " CUDA device(s)" +
                              (gpus == 0 ? "; use cpu:N devices" : ""));
    }
    return;
  }
  const auto base = c.resources.device;
  if (base.is_cpu()) return;
  const int gpus = kernels::cuda_device_count();
  if (gpus == 0 || (world_size == 1 && base.index >= gpus))
    throw ConfigError("/resources/device", base.str() + ": this machine has " + std::to_string(gpus) +
                                               " CUDA device(s)" + (gpus == 0 ? "; use cpu:0" : ""));
}

kernels::Device device_of_rank(const JobConfig& c, int rank, int world_size, WorldKind world, int local_rank) {
  if (!c.resources.devices.empty()) return c.resources.devices.at(static_cast<std::size_t>(rank));
  const auto base = c.resources.device;
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

pipeline::RecomputeMode JobPlan::recompute_of(int stage) const {
  if (recompute_stages.empty()) return recompute;
  return partition::stage_recomputes(recompute, recompute_stages, stage, schedule.stages) ? pipeline::RecomputeMode::All
                                                                                           : pipeline::RecomputeMode::None;
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

pipeline::SplitChoice split_choice_of(const JobPlan& plan) {
  const auto& c = plan.config;
  pipeline::SplitChoice choice;
  if (!c.pipeline.split.empty()) choice.split_points = c.pipeline.split;
  else if (!plan.model.split_points.empty()) choice.split_points = plan.model.split_points;
  else choice.method = c.pipeline.partition;
  return choice;
}

partition::CostModel cost_model_of(const JobPlan& plan) {
  const auto& c = plan.config;
  partition::CostModel cost;
  cost.stages = plan.schedule.stages;
  cost.chunks = plan.schedule.chunks;
  cost.placement = pipeline::chunk_placement(plan.schedule.kind);
  cost.micro_batches = plan.schedule.micro_batches;
  cost.in_flight = pipeline::in_flight_of(plan.schedule.kind);
  cost.backward = pipeline::backward_ops_of(plan.schedule.kind);
  cost.recompute = plan.recompute;
  cost.recompute_stages = plan.recompute_stages;
  cost.recompute_layers = plan.recompute_layers;
  // Offloaded state is host memory: it takes nothing from a stage's device budget.
  cost.optimizer_state = plan.optimizer.offload == models::OptimizerOffload::Host
                             ? 0
                             : partition::optimizer_state_tensors(plan.optimizer.kind);
  if (c.replicas.optimizer_state == dp::OptimizerState::Sharded) cost.optimizer_shards = plan.replicas();
  if (c.resources.device_memory > 0) cost.device_memory = {c.resources.device_memory};
  return cost;
}

partition::Partition choose_split(const JobPlan& plan, kernels::Device profile_on) {
  const auto& c = plan.config;
  const pipeline::SplitChoice choice = split_choice_of(plan);
  const partition::CostModel cost = cost_model_of(plan);
  std::vector<partition::LayerProfile> profiles;
  if (choice.split_points.empty() && choice.method == partition::PartitionMethod::Profile) {
    partition::check_stage_count(plan.model.layer_count(), cost.pieces(), plan.model.name);
    log::outputf("profiling %d layers of %s on %s...", plan.model.layer_count(), plan.model.name.c_str(),
                 profile_on.str().c_str());
    // One micro-batch in flight: the split needs the layers' times relative to each other, and the
    // profile runs on the job's device under its cap, where a chain holding two micro-batches of
    // the whole model can run out of memory in a job whose stages fit.
    profiles = partition::profile_layers(plan.model, profile_on,
                                         c.data.batch_size / plan.replicas() / plan.schedule.micro_batches, 3);
  }
  return pipeline::choose_partition(plan.model, choice, cost, profiles);
}

}  // namespace pw::train
