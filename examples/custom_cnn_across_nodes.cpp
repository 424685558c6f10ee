// Your own CNN, defined layer by layer, split into four pipeline stages by layer name, trained on
// Fashion-MNIST through the engine. The same program runs embedded (4 x R ranks as threads) or as
// one stage per process:
//
//   build/bin/example_custom_cnn --steps 50
//   build/bin/pipewright launch --nproc-per-node 4 -- build/bin/example_custom_cnn --steps 50
//   mpirun -np 4 build/bin/example_custom_cnn --steps 50
//   srun --ntasks 4 build/bin/example_custom_cnn --steps 50
//
// Every rank builds only its own stage's layers (a LayerSpec is a factory, not a layer). It uses
// only the installed headers; docs/own_model.md builds it outside this tree with find_package.
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>
#include <pipewright/pipewright.h>

namespace {

// Three conv blocks (conv, batch-norm, ReLU, pooling) and a two-layer classifier, for 1x28x28 inputs.
pw::partition::ModelDescription small_cnn() {
  namespace L = pw::layers;
  pw::partition::ModelDescription m;
  m.name = "custom-cnn";
  m.sample_shape = {1, 28, 28};
  m.num_classes = 10;
  m.layers = {L::conv2d("conv1", 1, 16, 3, 1, 1),      L::batch_norm2d("bn1", 16),
              L::relu("relu1"),                         L::max_pool2d("pool1", 2, 2),   // 14x14
              L::conv2d("conv2", 16, 32, 3, 1, 1),     L::batch_norm2d("bn2", 32),
              L::relu("relu2"),                         L::max_pool2d("pool2", 2, 2),   // 7x7
              L::conv2d("conv3", 32, 64, 3, 1, 1),     L::batch_norm2d("bn3", 64),
              L::relu("relu3"),                         L::flatten("flatten"),
              L::linear("fc1", 64 * 7 * 7, 128),       L::relu("relu4"),
              L::linear("fc2", 128, 10)};
  // The stages, marked by the layer each one starts at.
  m.split_points = pw::partition::split_before(m, {"conv2", "conv3", "flatten"});
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  pw::train::JobConfig job;
  pw::train::FitOptions out;
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
  job.optimizer.kind = pw::models::OptimizerKind::Adam;
  job.optimizer.lr = 1e-3;
  job.resources.threads = threads;
  try {
    const auto summary = pw::train::run_job(job, out);
    if (!summary.empty())
      std::printf("custom-cnn: final loss %.4f, test accuracy %.4f over %d stages x %d replicas (%s)\n",
                  summary["final_loss"].get<double>(), summary["test_accuracy"].get<double>(),
                  summary["stages"].get<int>(), summary["replicas"].get<int>(),
                  summary["launcher"].get<std::string>().c_str());
    return 0;
  } catch (const pw::AbortedError& e) {
    std::fprintf(stderr, "example_custom_cnn: stopped: %s\n", e.what());
    return 5;
  } catch (const pw::InputError& e) {
    std::fprintf(stderr, "example_custom_cnn: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "example_custom_cnn: error: %s\n", e.what());
    return 1;
  }
}
