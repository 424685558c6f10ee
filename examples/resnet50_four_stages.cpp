// Split ResNet-50 by hand into four pipeline stages and train it on Fashion-MNIST.
//
// The split is written in code: each stage starts at a named layer of the zoo model's description.
// Every stage is a rank with its own logical CPU device (cpu:0..3), its own memory cap and its own
// threads; micro-batches flow through them on the 1F1B schedule. A step callback prints each
// step's loss, speed and the stages' peak memory.
//
//   build/bin/example_resnet50_four_stages [steps]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

#include <pipewright/pipewright.h>

namespace {

std::string mebibytes(std::int64_t bytes) { return std::to_string(bytes / (1024 * 1024)) + " MiB"; }

}  // namespace

int main(int argc, char** argv) try {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 20;

  pw::partition::ZooOptions options;
  options.width = 16;
  options.sample_shape = {1, 28, 28};   // Fashion-MNIST
  auto model = pw::partition::describe_zoo_model("resnet50", options);
  // Stage 0: the stem and layer1; stage 1: layer2; stage 2: layer3; stage 3: layer4 and the head.
  model.split_points = pw::partition::split_before(model, {"layer2.0", "layer3.0", "layer4.0"});

  for (std::size_t s = 0; s <= model.split_points.size(); ++s) {
    const int begin = s == 0 ? 0 : model.split_points[s - 1];
    const int end = s < model.split_points.size() ? model.split_points[s] : model.layer_count();
    std::printf("stage %zu: layers %d..%d (%s .. %s)\n", s, begin, end - 1,
                model.layers[static_cast<std::size_t>(begin)].name.c_str(),
                model.layers[static_cast<std::size_t>(end - 1)].name.c_str());
  }

  pw::train::JobConfig job;
  job.program_model = model;
  job.data.dataset = "fashion-mnist";
  job.data.batch_size = 64;
  job.data.steps = steps;
  job.data.eval_batches = 2;
  job.pipeline.micro_batches = 8;
  job.resources.threads = 1;
  job.resources.device_memory = std::int64_t{256} << 20;   // per stage: more than a quarter of the model, less than all of it
  job.optimizer.kind = pw::models::OptimizerKind::Adam;
  job.optimizer.lr = 1e-3;

  pw::train::FitOptions out;
  out.progress = false;
  std::vector<std::int64_t> peaks;
  pw::train::FitCallbacks callbacks;
  callbacks.on_step = [&](const pw::train::StepEvent& e) {
    std::printf("step %3lld  loss %.4f  %.0f samples/s\n", static_cast<long long>(e.step), e.outcome->loss,
                static_cast<double>(e.outcome->samples) / e.seconds);
    peaks = e.outcome->stage_peak_memory;
  };
  pw::train::run_job(job, out, callbacks);
  for (std::size_t s = 0; s < peaks.size(); ++s) std::printf("stage %zu peak memory %s\n", s, mebibytes(peaks[s]).c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "example: error: %s\n", e.what());
  return 1;
}
