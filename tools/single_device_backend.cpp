#include "core/units.h"
#include "kernels/runtime.h"
#include "kernels/stream.h"
#include "models/checkpoint.h"
#include "tools/train_backend.h"

namespace pw::tools {
namespace {

class SingleDeviceBackend : public TrainBackend {
 public:
  SingleDeviceBackend(const TrainOptions& o, const models::ModelSpec& spec, const models::OptimizerConfig& oc)
      : device_(kernels::Device::parse(o.device)), runtime_(kernels::DeviceRuntime::get(device_)) {
    if (o.threads > 0) runtime_.set_threads(o.threads);
    if (!o.device_memory.empty()) runtime_.set_memory_cap(parse_bytes(o.device_memory));
    model_ = models::build_model(spec, o.seed);
    if (!o.load_path.empty()) models::load_weights(*model_, o.load_path);
    model_->to(device_);
    optimizer_ = std::make_unique<models::Optimizer>(model_->parameters(), oc);
    trainer_ = std::make_unique<models::Trainer>(*model_, *optimizer_, device_, spec.objective);
  }

  std::string describe() const override { return device_.str(); }

  StepOutcome step(const models::data::Batch& batch) override {
    const auto r = trainer_->train_step(batch);
    return {r.loss, r.correct, r.samples, {}};
  }

  models::EvalResult evaluate(models::data::DataLoader& loader, std::int64_t max_batches) override {
    return trainer_->evaluate(loader, max_batches);
  }

  void save(const std::string& path, const std::string& model_name) override {
    models::save_weights(*model_, path, model_name);
  }

  void reset_peak_memory() override { runtime_.allocator().reset_peak(); }
  void synchronize() override { kernels::current_stream(device_).synchronize(); }

  TraceMeta trace_meta() const override { return {}; }   // --trace runs a one-stage pipeline instead

  void add_summary(nlohmann::json& j, const std::vector<double>&, double) override {
    j["device"] = device_.str();
    j["threads"] = runtime_.threads();
    j["peak_memory_bytes"] = runtime_.allocator().stats().peak_in_use;
  }

 private:
  kernels::Device device_;
  kernels::DeviceRuntime& runtime_;
  std::unique_ptr<models::Sequential> model_;
  std::unique_ptr<models::Optimizer> optimizer_;
  std::unique_ptr<models::Trainer> trainer_;
};

}  // namespace

std::unique_ptr<TrainBackend> make_single_device_backend(const TrainOptions& o, const models::ModelSpec& spec,
                                                         const models::OptimizerConfig& optimizer) {
  return std::make_unique<SingleDeviceBackend>(o, spec, optimizer);
}

}  // namespace pw::tools
