// Split ResNet-50 by hand into four pipeline stages and train it on Fashion-MNIST.
//
// The split is written in code: each stage starts at a named layer of the model description.
// Every stage is an engine on its own thread with its own logical CPU device (cpu:0..3), its own
// memory cap and its own threads; micro-batches flow through them on the 1F1B schedule. This
// program feeds the batches itself (train::EmbeddedJob); examples/custom_cnn_across_nodes.cpp
// lets the engine's loop do it, embedded or across processes.
//
//   build/bin/example_resnet50_four_stages [steps]
#include <cstdio>
#include <cstdlib>

#include "core/units.h"
#include "kernels/runtime.h"
#include "models/data/dataset.h"
#include "partition/model_description.h"
#include "core/clock.h"
#include "train/embedded_job.h"

using namespace pw;

namespace {
int layer_index(const partition::ModelDescription& model, const std::string& name) {
  for (int i = 0; i < model.layer_count(); ++i)
    if (model.layers[static_cast<std::size_t>(i)].name == name) return i;
  throw InputError("no layer named '" + name + "' in " + model.name);
}
}  // namespace

int main(int argc, char** argv) try {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 20;
  auto train = models::data::open_dataset("fashion-mnist", models::data::Split::Train);

  models::ModelOptions options;
  options.width = 16;
  options.sample_shape = train->sample_shape();
  auto model = partition::describe(models::make_model_spec("resnet50", options));

  // Stage 0: the stem and layer1; stage 1: layer2; stage 2: layer3; stage 3: layer4 and the head.
  model.split_points = {layer_index(model, "layer2.0"), layer_index(model, "layer3.0"), layer_index(model, "layer4.0")};
  const auto split = partition::explicit_partition(model);

  train::JobConfig job;
  job.program_model = model;
  job.data.batch_size = 64;
  job.pipeline.stages = 4;
  job.pipeline.micro_batches = 8;
  job.resources.threads = 1;
  job.resources.device_memory = "256MiB";   // per stage: more than a quarter of the model, less than all of it
  job.optimizer.kind = "adam";
  job.optimizer.lr = 1e-3;
  train::EmbeddedJob trainer(train::plan_job(job, false));

  for (std::size_t s = 0; s < split.size(); ++s)
    std::printf("stage %zu: layers %d..%d (%s .. %s)\n", s, split[s].begin, split[s].end - 1,
                model.layers[static_cast<std::size_t>(split[s].begin)].name.c_str(),
                model.layers[static_cast<std::size_t>(split[s].end - 1)].name.c_str());

  models::data::DataLoader loader(*train, 64, models::data::Shuffle::Yes, 0, models::data::LastBatch::Drop);
  loader.start_epoch(0);
  std::vector<std::int64_t> peaks;
  for (int step = 1; step <= steps; ++step) {
    const auto t0 = Clock::now();
    const auto r = trainer.step(*loader.next());
    std::printf("step %3d  loss %.4f  %.0f samples/s\n", step, r.loss, static_cast<double>(r.samples) / seconds_since(t0));
    peaks = r.stage_peak_memory;
  }
  for (std::size_t s = 0; s < peaks.size(); ++s)
    std::printf("stage %zu peak memory %s\n", s, format_bytes(peaks[s]).c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "example: error: %s\n", e.what());
  return 1;
}
