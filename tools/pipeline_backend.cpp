#include <cstdio>
#include <sstream>

#include "core/units.h"
#include "kernels/runtime.h"
#include "kernels/stream.h"
#include "models/checkpoint.h"
#include "partition/partitioners.h"
#include "dataparallel/hybrid_trainer.h"
#include "tools/pipeline_setup.h"
#include "tools/train_backend.h"

namespace pw::tools {
namespace {

class PipelineBackend : public TrainBackend {
 public:
  PipelineBackend(const TrainOptions& o, const models::ModelSpec& spec, const models::OptimizerConfig& oc) {
    pipeline::PipelineOptions po;
    po.spec = schedule_of(o);
    const int stages = po.spec.stages;
    // Stage counts and split points are checked before anything is built or profiled.
    model_ = partition::describe(spec);
    check_pipeline_flags(o, model_, po.spec);
    po.devices = parse_devices(o, stages);
    const int ranks = stages * o.replicas;
    const int threads = o.threads > 0 ? o.threads
                                      : std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / ranks);
    for (const auto& d : po.devices) {
      auto& rt = kernels::DeviceRuntime::get(d);
      if (d.is_cpu()) rt.set_threads(threads);
      if (!o.device_memory.empty()) rt.set_memory_cap(parse_bytes(o.device_memory));
    }
    po.recompute = partition::parse_recompute(o.recompute);
    po.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(o.stage_timeout_seconds * 1000));
    po.optimizer = oc;
    po.seed = o.seed;
    po.objective = spec.objective;
    // One process: in-process links unless Thrift is forced (it then runs over loopback).
    PW_INPUT_CHECK(o.transport == "auto" || o.transport == "inprocess" || o.transport == "thrift",
                   "--transport " << o.transport << ": the stages of this job share one process, where auto, inprocess "
                                  "or thrift work; NCCL links need one process per GPU (pipewright launch)");
    po.links = o.transport == "thrift" ? pipeline::StageLinks::Thrift : pipeline::StageLinks::InProcess;
    links_ = o.transport == "thrift" ? "thrift" : "inprocess";
    devices_ = po.devices;
    spec_ = po.spec;
    recompute_ = po.recompute;
    partition_ = split_for(o, model_, po.spec, po.devices.front());
    dp::BucketOptions buckets;
    buckets.bucket_bytes = bucket_bytes_of(o);
    buckets.compression = dp::parse_compression(o.grad_compression);
    compression_ = buckets.compression;
    bucket_bytes_ = buckets.bucket_bytes;
    trainer_ = std::make_unique<dp::HybridTrainer>(model_, partition_, po, o.replicas, buckets);
    if (o.replicas > 1) std::fprintf(stderr, "%s", trainer_->topology().grid().c_str());
    if (!o.load_path.empty())
      for (int r = 0; r < o.replicas; ++r) {
        std::vector<models::Layer*> layers;
        for (auto& [stage, piece] : pieces(r)) layers.push_back(piece);
        models::load_weights(layers, o.load_path);
      }
  }

  std::string describe() const override {
    std::ostringstream out;
    const int replicas = trainer_->topology().replicas();
    if (replicas > 1) out << replicas << " replicas x ";
    out << spec_.stages << " stages (" << pipeline::schedule_kind_name(spec_.kind) << ", " << spec_.micro_batches
        << " micro-batches";
    if (spec_.chunks > 1) out << ", " << spec_.chunks << " chunks";
    if (partition_.size() > 1) out << ", split " << split_text();
    out << ") on ";
    for (std::size_t i = 0; i < devices_.size(); ++i) out << (i ? "," : "") << devices_[i].str();
    return out.str();
  }

  // Micro-batches per global batch: evaluation batches are the size a stage sees in training.
  int micro_batches() const override { return spec_.micro_batches * trainer_->topology().replicas(); }

  StepOutcome step(const models::data::Batch& batch) override {
    auto r = trainer_->train_step(batch);
    return {r.loss, r.correct, r.samples, std::move(r.stage_busy_seconds)};
  }

  models::EvalResult evaluate(models::data::DataLoader& loader, std::int64_t max_batches) override {
    return trainer_->evaluate(loader, max_batches);
  }

  void save(const std::string& path, const std::string& model_name) override {
    std::vector<models::Layer*> layers;
    for (auto& [name, piece] : pieces(0)) layers.push_back(piece);
    models::save_weights(layers, path, model_name);
  }

  void reset_peak_memory() override {
    for (const auto& d : devices_) kernels::DeviceRuntime::get(d).allocator().reset_peak();
  }
  void synchronize() override {
    for (const auto& d : devices_) kernels::current_stream(d).synchronize();
  }

  TraceMeta trace_meta() const override {
    TraceMeta m;
    m.model = model_.name;
    m.schedule = pipeline::schedule_kind_name(spec_.kind);
    m.stages = spec_.stages;
    m.replicas = trainer_->topology().replicas();
    m.micro_batches = spec_.micro_batches;
    m.chunks = spec_.chunks;
    for (std::size_t i = 1; i < partition_.size(); ++i) m.split.push_back(partition_[i].begin);
    for (const auto& l : model_.layers) m.layer_names.push_back(l.name);
    return m;
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
    j["transport"] = links_;
    j["replicas"] = trainer_->topology().replicas();
    if (trainer_->topology().replicas() > 1) {
      j["bucket_bytes"] = bucket_bytes_;
      j["grad_compression"] = dp::compression_name(compression_);
      const auto stats = trainer_->reduce_stats();
      std::vector<std::int64_t> buckets;   // replica 0's stages
      for (int s = 0; s < spec_.stages; ++s) buckets.push_back(stats[static_cast<std::size_t>(s)].buckets);
      j["gradient_buckets"] = buckets;
      double exposed = 0.0;
      for (const auto& s : stats) exposed = std::max(exposed, s.exposed_seconds);
      j["allreduce_exposed_seconds_last_step"] = exposed;
    }
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
  std::vector<std::pair<int, models::Layer*>> pieces(int replica) {
    std::vector<std::pair<int, models::Layer*>> out;
    auto& t = trainer_->replica(replica);
    for (int s = 0; s < t.stages(); ++s)
      for (auto* layer : t.stage_layers(s)) out.emplace_back(s, layer);
    return out;
  }

  std::vector<kernels::Device> devices_;
  std::string links_;
  pipeline::ScheduleSpec spec_;
  pipeline::RecomputeMode recompute_ = pipeline::RecomputeMode::None;
  partition::ModelDescription model_;
  partition::Partition partition_;
  dp::Compression compression_ = dp::Compression::None;
  std::size_t bucket_bytes_ = 0;
  std::unique_ptr<dp::HybridTrainer> trainer_;
};

}  // namespace

bool wants_pipeline(const TrainOptions& o) {
  // Any pipeline flag away from its default selects the pipeline (one stage is a valid pipeline),
  // so none is silently ignored.
  const TrainOptions defaults;
  return o.stages > 1 || o.micro_batches > 1 || !o.devices.empty() || !o.split.empty() || o.chunks > 1 ||
         o.schedule != defaults.schedule || o.recompute != defaults.recompute || o.partition != defaults.partition ||
         o.transport != defaults.transport || o.replicas > 1 || !o.trace_path.empty();
}

std::unique_ptr<TrainBackend> make_pipeline_backend(const TrainOptions& o, const models::ModelSpec& spec,
                                                    const models::OptimizerConfig& optimizer) {
  return std::make_unique<PipelineBackend>(o, spec, optimizer);
}

}  // namespace pw::tools
