#include <cstdio>
#include <sstream>

#include "core/units.h"
#include "kernels/runtime.h"
#include "kernels/stream.h"
#include "models/checkpoint.h"
#include "partition/partitioners.h"
#include "pipeline/pipeline_trainer.h"
#include "pipeline/planner.h"
#include "tools/train_backend.h"

namespace pw::tools {
namespace {

std::vector<kernels::Device> parse_devices(const TrainOptions& o, int stages) {
  std::vector<kernels::Device> devices;
  if (!o.devices.empty()) {
    std::stringstream in(o.devices);
    std::string item;
    while (std::getline(in, item, ',')) devices.push_back(kernels::Device::parse(item));
    PW_INPUT_CHECK(static_cast<int>(devices.size()) == stages,
                   "--devices lists " << devices.size() << " devices for " << stages
                                      << " stages; give one per stage, e.g. cpu:0,cpu:1");
  } else {
    const auto base = kernels::Device::parse(o.device);
    const int gpus = kernels::cuda_device_count();
    for (int s = 0; s < stages; ++s)
      devices.push_back(base.is_cpu() ? kernels::Device::cpu(s) : kernels::Device::cuda(gpus > 0 ? s % gpus : 0));
  }
  const int gpus = kernels::cuda_device_count();
  for (const auto& d : devices)
    PW_INPUT_CHECK(d.is_cpu() || d.index < gpus, "device " << d.str() << ": this machine has " << gpus
                                                           << " CUDA device(s)" << (gpus == 0 ? "; use cpu:N devices" : ""));
  return devices;
}

// --stages defaults to the pieces --split makes (over --chunks), --micro-batches to one per stage.
pipeline::ScheduleSpec schedule_of(const TrainOptions& o) {
  pipeline::ScheduleSpec s;
  s.kind = pipeline::parse_schedule_kind(o.schedule);
  s.chunks = o.chunks;
  const int pieces = o.split.empty() ? 0 : static_cast<int>(partition::parse_split_points(o.split).size()) + 1;
  if (o.stages > 0) {
    s.stages = o.stages;
    PW_INPUT_CHECK(pieces == 0 || pieces == s.stages * s.chunks,
                   "--split " << o.split << " makes " << pieces << " pieces but --stages " << s.stages << " x --chunks "
                              << s.chunks << " needs " << s.stages * s.chunks);
  } else {
    PW_INPUT_CHECK(pieces % s.chunks == 0, "--split " << o.split << " makes " << pieces
                                                      << " pieces, not a multiple of --chunks " << s.chunks);
    s.stages = pieces > 0 ? pieces / s.chunks : 1;
  }
  s.micro_batches = o.micro_batches > 0 ? o.micro_batches : s.stages;
  validate(s);
  return s;
}

// The split for --split or --partition; the profile method measures every layer on the first
// stage's device with one micro-batch first.
partition::Partition split_for(const TrainOptions& o, const partition::ModelDescription& model,
                               const pipeline::ScheduleSpec& spec, const std::vector<kernels::Device>& devices) {
  pipeline::SplitChoice choice;
  if (!o.split.empty()) choice.split_points = partition::parse_split_points(o.split);
  else choice.method = partition::parse_partition_method(o.partition);
  partition::CostModel cost;
  cost.stages = spec.stages;
  cost.chunks = spec.chunks;
  cost.micro_batches = spec.micro_batches;
  cost.in_flight = pipeline::in_flight_of(spec.kind);
  cost.recompute = partition::parse_recompute(o.recompute);
  cost.optimizer_state = partition::optimizer_state_tensors(models::parse_optimizer_kind(o.optimizer));
  if (!o.device_memory.empty()) cost.device_memory = {parse_bytes(o.device_memory)};
  std::vector<partition::LayerProfile> profiles;
  if (choice.split_points.empty() && choice.method == partition::PartitionMethod::Profile) {
    partition::check_stage_count(model.layer_count(), cost.pieces(), model.name);
    std::fprintf(stderr, "profiling %d layers of %s on %s...\n", model.layer_count(), model.name.c_str(),
                 devices.front().str().c_str());
    profiles = partition::profile_layers(model, devices.front(), o.batch_size / spec.micro_batches, 3);
  }
  return pipeline::choose_partition(model, choice, cost, profiles);
}

class PipelineBackend : public TrainBackend {
 public:
  PipelineBackend(const TrainOptions& o, const models::ModelSpec& spec, const models::OptimizerConfig& oc) {
    pipeline::PipelineOptions po;
    po.spec = schedule_of(o);
    const int stages = po.spec.stages;
    // Stage counts and split points are checked before anything is built or profiled.
    model_ = partition::describe(spec);
    partition::check_stage_count(model_.layer_count(), stages * po.spec.chunks, model_.name);
    if (!o.split.empty())
      partition::split_at(model_.layer_count(), partition::parse_split_points(o.split), {"--split", model_.name});
    PW_INPUT_CHECK(o.batch_size % po.spec.micro_batches == 0,
                   "--batch-size " << o.batch_size << " does not split into " << po.spec.micro_batches
                                   << " equal micro-batches; use a batch size divisible by " << po.spec.micro_batches);
    po.devices = parse_devices(o, stages);
    const int threads = o.threads > 0 ? o.threads
                                      : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / stages);
    for (const auto& d : po.devices) {
      auto& rt = kernels::DeviceRuntime::get(d);
      if (d.is_cpu()) rt.set_threads(threads);
      if (!o.device_memory.empty()) rt.set_memory_cap(parse_bytes(o.device_memory));
    }
    po.recompute = partition::parse_recompute(o.recompute);
    po.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(o.stage_timeout_seconds * 1000));
    po.optimizer = oc;
    po.seed = o.seed;
    devices_ = po.devices;
    spec_ = po.spec;
    recompute_ = po.recompute;
    partition_ = split_for(o, model_, po.spec, po.devices);
    trainer_ = std::make_unique<pipeline::PipelineTrainer>(model_, partition_, po);
    if (!o.load_path.empty()) {
      std::vector<models::Layer*> layers;
      for (auto& [stage, piece] : pieces()) layers.push_back(piece);
      models::load_weights(layers, o.load_path);
    }
  }

  std::string describe() const override {
    std::ostringstream out;
    out << spec_.stages << " stages (" << pipeline::schedule_kind_name(spec_.kind) << ", " << spec_.micro_batches
        << " micro-batches";
    if (spec_.chunks > 1) out << ", " << spec_.chunks << " chunks";
    if (partition_.size() > 1) out << ", split " << split_text();
    out << ") on ";
    for (std::size_t i = 0; i < devices_.size(); ++i) out << (i ? "," : "") << devices_[i].str();
    return out.str();
  }

  int micro_batches() const override { return spec_.micro_batches; }

  StepOutcome step(const models::data::Batch& batch) override {
    auto r = trainer_->train_step(batch);
    return {r.loss, r.correct, r.samples, std::move(r.stage_busy_seconds)};
  }

  models::EvalResult evaluate(models::data::DataLoader& loader, std::int64_t max_batches) override {
    return trainer_->evaluate(loader, max_batches);
  }

  void save(const std::string& path, const std::string& model_name) override {
    std::vector<models::Layer*> layers;
    for (auto& [name, piece] : pieces()) layers.push_back(piece);
    models::save_weights(layers, path, model_name);
  }

  void reset_peak_memory() override {
    for (const auto& d : devices_) kernels::DeviceRuntime::get(d).allocator().reset_peak();
  }
  void synchronize() override {
    for (const auto& d : devices_) kernels::current_stream(d).synchronize();
  }

  void add_summary(nlohmann::json& j, const std::vector<double>& busy, double train_seconds) override {
    std::vector<std::string> names;
    for (const auto& d : devices_) names.push_back(d.str());
    j["device"] = names.front();
    j["devices"] = names;
    j["threads"] = kernels::DeviceRuntime::get(devices_.front()).threads();
    j["stages"] = spec_.stages;
    j["micro_batches"] = spec_.micro_batches;
    j["schedule"] = pipeline::schedule_kind_name(spec_.kind);
    j["chunks"] = spec_.chunks;
    j["recompute"] = partition::recompute_name(recompute_);
    std::vector<int> split;
    for (std::size_t i = 1; i < partition_.size(); ++i) split.push_back(partition_[i].begin);
    j["split"] = split;
    const auto peaks = trainer_->stage_peak_memory();
    j["stage_peak_memory_bytes"] = peaks;
    j["peak_memory_bytes"] = *std::max_element(peaks.begin(), peaks.end());
    std::vector<double> fraction;
    for (double b : busy) fraction.push_back(train_seconds > 0 ? b / train_seconds : 0.0);
    j["stage_busy_fraction"] = fraction;
  }

 private:
  std::string split_text() const {
    std::ostringstream out;
    for (std::size_t i = 1; i < partition_.size(); ++i) out << (i > 1 ? "," : "") << partition_[i].begin;
    return out.str();
  }
  std::vector<std::pair<int, models::Layer*>> pieces() {
    std::vector<std::pair<int, models::Layer*>> out;
    for (int s = 0; s < trainer_->stages(); ++s)
      for (auto* layer : trainer_->stage_layers(s)) out.emplace_back(s, layer);
    return out;
  }

  std::vector<kernels::Device> devices_;
  pipeline::ScheduleSpec spec_;
  pipeline::RecomputeMode recompute_ = pipeline::RecomputeMode::None;
  partition::ModelDescription model_;
  partition::Partition partition_;
  std::unique_ptr<pipeline::PipelineTrainer> trainer_;
};

}  // namespace

bool wants_pipeline(const TrainOptions& o) {
  // Any pipeline flag away from its default selects the pipeline (one stage is a valid pipeline),
  // so none is silently ignored.
  const TrainOptions defaults;
  return o.stages > 1 || o.micro_batches > 1 || !o.devices.empty() || !o.split.empty() || o.chunks > 1 ||
         o.schedule != defaults.schedule || o.recompute != defaults.recompute || o.partition != defaults.partition;
}

std::unique_ptr<TrainBackend> make_pipeline_backend(const TrainOptions& o, const models::ModelSpec& spec,
                                                    const models::OptimizerConfig& optimizer) {
  return std::make_unique<PipelineBackend>(o, spec, optimizer);
}

}  // namespace pw::tools
