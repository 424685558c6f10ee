#pragma once
// Jobs for the engine's tests: a model description and a pipeline shape as a JobConfig.
#include <string>
#include <tuple>
#include <vector>

#include "models/layers/linear.h"
#include "models/layers/simple.h"
#include "partition/model_description.h"
#include "pipewright/fit.h"
#include "pipeline/schedule.h"
#include "train/job_config.h"

namespace pw::test {

struct JobShape {
  pipeline::ScheduleKind kind = pipeline::ScheduleKind::OneFOneB;
  int stages = 1;
  int micro_batches = 1;
  int chunks = 1;
  std::vector<int> split;
  std::string recompute = "none";
  int replicas = 1;
  int first_device = 0;   // ranks on cpu:first_device, cpu:first_device + 1, ...
};

// A 1x12x12-input MLP made of these layers: "flatten", "relu*" (ReLU), anything else a
// Linear of `in` to `out` features (given per layer), with `tied` weight groups.
inline partition::ModelDescription mlp_of(const std::string& name,
                                          const std::vector<std::tuple<std::string, int, int>>& layers,
                                          std::vector<partition::TiedSpec> tied) {
  partition::ModelDescription m;
  m.name = name;
  m.sample_shape = {1, 12, 12};
  m.num_classes = 10;
  for (const auto& [layer, in, out] : layers) {
    if (layer == "flatten")
      m.layers.push_back({layer, [] { return std::unique_ptr<models::Layer>(std::make_unique<models::Flatten>()); }});
    else if (layer.rfind("relu", 0) == 0)
      m.layers.push_back({layer, [] { return std::unique_ptr<models::Layer>(std::make_unique<models::ReLU>()); }});
    else
      m.layers.push_back(
          {layer, [in = in, out = out] { return std::unique_ptr<models::Layer>(std::make_unique<models::Linear>(in, out)); }});
  }
  m.tied = std::move(tied);
  return m;
}

// An MLP on 1x12x12 inputs whose two middle layers share one weight ("mid").
inline partition::ModelDescription tied_mlp() {
  return mlp_of("tied-mlp",
                {{"flatten", 0, 0}, {"fc_in", 144, 32}, {"relu1", 0, 0}, {"fc_mid", 32, 32}, {"relu2", 0, 0},
                 {"fc_mid2", 32, 32}, {"relu3", 0, 0}, {"fc_out", 32, 10}},
                {{"mid", {"fc_mid.weight", "fc_mid2.weight"}}});
}

// An MLP on 1x12x12 inputs whose second layer and second-to-last layer share one weight ("ends"):
// split at {3, 5, 8} into four pieces they are in the first and the last, which V placement puts
// on stage 0 together.
inline partition::ModelDescription tied_ends_mlp() {
  return mlp_of("tied-ends-mlp",
                {{"flatten", 0, 0}, {"fc_in", 144, 32}, {"fc_first", 32, 32}, {"relu1", 0, 0}, {"fc_mid", 32, 32},
                 {"relu2", 0, 0}, {"fc_mid2", 32, 32}, {"relu3", 0, 0}, {"fc_last", 32, 32}, {"fc_out", 32, 10}},
                {{"ends", {"fc_first.weight", "fc_last.weight"}}});
}

inline train::JobConfig job_of(const partition::ModelDescription& model, const JobShape& shape,
                               std::int64_t batch_size) {
  train::JobConfig c;
  c.program_model = model;
  c.data.dataset = "synthetic";
  c.data.synthetic_shape = model.sample_shape;
  c.data.synthetic_size = 256;
  c.data.batch_size = batch_size;
  c.pipeline.schedule = shape.kind;
  c.pipeline.stages = shape.stages;
  c.pipeline.micro_batches = shape.micro_batches;
  c.pipeline.chunks = shape.chunks;
  c.pipeline.split = shape.split;
  c.pipeline.recompute = parse_enum<partition::Recompute>(shape.recompute);
  c.replicas.replicas = shape.replicas;
  for (int r = 0; r < shape.stages * shape.replicas; ++r)
    c.resources.devices.push_back(kernels::Device::cpu(shape.first_device + r));
  c.resources.threads = 1;
  c.optimizer.kind = models::OptimizerKind::Sgd;
  c.optimizer.lr = 0.05;
  c.seed = 11;
  c.timeouts.stage_seconds = 20;
  return c;
}

// The loss of every step of `job`, run embedded without progress output.
inline std::vector<double> step_losses(const train::JobConfig& job) {
  std::vector<double> out;
  train::FitOptions fit;
  fit.progress = false;
  train::FitCallbacks callbacks;
  callbacks.on_step = [&](const train::StepEvent& e) { out.push_back(e.outcome->loss); };
  train::run_job(job, fit, callbacks);
  return out;
}

}  // namespace pw::test
