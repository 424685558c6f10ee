// Your own CNN, defined layer by layer, split into four pipeline stages by layer name, trained on
// Fashion-MNIST through the engine. The same program runs embedded (4 x R ranks as threads) or as
// one stage per process:
//
//   build/bin/example_custom_cnn --steps 50
//   build/bin/pipewright launch --nproc-per-node 4 -- build/bin/example_custom_cnn --steps 50
//   mpirun -np 4 build/bin/example_custom_cnn --steps 50
//   srun --ntasks 4 build/bin/example_custom_cnn --steps 50
//
// Every rank builds only its own stage's layers (a LayerSpec is a factory, not a layer).
#include <cstdio>
#include <memory>

#include <CLI/CLI.hpp>

#include "models/layers/batch_norm.h"
#include "models/layers/conv2d.h"
#include "models/layers/linear.h"
#include "models/layers/simple.h"
#include "rpc/transport.h"
#include "train/fit.h"

using namespace pw;

namespace {

template <typename L, typename... Args>
models::LayerSpec layer(std::string name, Args... args) {
  return {std::move(name), [=] { return std::unique_ptr<models::Layer>(std::make_unique<L>(args...)); }};
}

int index_of(const partition::ModelDescription& model, const std::string& name) {
  for (int i = 0; i < model.layer_count(); ++i)
    if (model.layers[static_cast<std::size_t>(i)].name == name) return i;
  throw InputError("no layer named '" + name + "' in " + model.name);
}

// Three conv blocks (conv, batch-norm, ReLU, pooling) and a two-layer classifier, for 1x28x28 inputs.
partition::ModelDescription small_cnn() {
  using models::BatchNorm2d;
  using models::Conv2d;
  partition::ModelDescription m;
  m.name = "custom-cnn";
  m.sample_shape = {1, 28, 28};
  m.num_classes = 10;
  m.layers = {layer<Conv2d>("conv1", 1, 16, 3, 1, 1),     layer<BatchNorm2d>("bn1", 16),
              layer<models::ReLU>("relu1"),                layer<models::MaxPool2d>("pool1", 2, 2, 0),   // 14x14
              layer<Conv2d>("conv2", 16, 32, 3, 1, 1),    layer<BatchNorm2d>("bn2", 32),
              layer<models::ReLU>("relu2"),                layer<models::MaxPool2d>("pool2", 2, 2, 0),   // 7x7
              layer<Conv2d>("conv3", 32, 64, 3, 1, 1),    layer<BatchNorm2d>("bn3", 64),
              layer<models::ReLU>("relu3"),                layer<models::Flatten>("flatten"),
              layer<models::Linear>("fc1", 64 * 7 * 7, 128), layer<models::ReLU>("relu4"),
              layer<models::Linear>("fc2", 128, 10)};
  // The stages, marked by the layer each one starts at.
  m.split_points = {index_of(m, "conv2"), index_of(m, "conv3"), index_of(m, "flatten")};
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  train::JobConfig job;
  train::FitOptions out;
  int threads = 1;
  CLI::App app{"Train a CNN defined in this program as a 4-stage pipeline on Fashion-MNIST"};
  app.add_option("--steps", job.data.steps, "optimizer steps")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--replicas", job.replicas.replicas, "data-parallel replicas of the pipeline")
      ->check(CLI::Range(1, 64))->capture_default_str();
  app.add_option("--batch-size", job.data.batch_size, "global batch")->capture_default_str();
  app.add_option("--micro-batches", job.pipeline.micro_batches, "micro-batches per replica (default: 4)");
  app.add_option("--threads", threads, "CPU threads per rank")->capture_default_str();
  app.add_option("--data-dir", job.resources.data_dir, "folder with the Fashion-MNIST files");
  app.add_option("--summary", out.summary_path, "write the JSON summary here (the fields of pipewright train)");
  app.add_option("--save", out.save_path, "save the trained weights here (safetensors)");
  job.data.steps = 100;
  CLI11_PARSE(app, argc, argv);

  job.program_model = small_cnn();
  job.data.dataset = "fashion-mnist";
  job.optimizer.kind = "adam";
  job.optimizer.lr = 1e-3;
  job.resources.threads = threads;
  try {
    const auto summary = train::run_job(job, out);
    if (!summary.empty())
      std::printf("custom-cnn: final loss %.4f, test accuracy %.4f over %d stages x %d replicas (%s)\n",
                  summary["final_loss"].get<double>(), summary["test_accuracy"].get<double>(),
                  summary["stages"].get<int>(), summary["replicas"].get<int>(),
                  summary["launcher"].get<std::string>().c_str());
    return 0;
  } catch (const rpc::AbortedError& e) {
    std::fprintf(stderr, "example_custom_cnn: stopped: %s\n", e.what());
    return 5;
  } catch (const InputError& e) {
    std::fprintf(stderr, "example_custom_cnn: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "example_custom_cnn: error: %s\n", e.what());
    return 1;
  }
}
