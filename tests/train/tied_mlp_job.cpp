// A user program for the engine's multi-process tests: an MLP whose two middle layers (on two
// different stages) share one weight, trained on synthetic 1x12x12 images, embedded or one
// stage per process under pipewright launch.
//   tied_mlp_job --steps N --summary FILE --save FILE
#include <cstdio>

#include <CLI/CLI.hpp>

#include "rpc/transport.h"
#include "tests/train/job_test_util.h"
#include "train/fit.h"

using namespace pw;

int main(int argc, char** argv) {
  train::JobConfig job;
  train::FitOptions out;
  CLI::App app{"tied-weight MLP as a pipeline"};
  job.data.steps = 5;
  app.add_option("--steps", job.data.steps);
  app.add_option("--stages", job.pipeline.stages);
  app.add_option("--summary", out.summary_path);
  app.add_option("--save", out.save_path);
  CLI11_PARSE(app, argc, argv);

  auto m = pw::test::tied_mlp();
  m.split_points = {4};   // fc_mid on stage 0, fc_mid2 on stage 1
  job.program_model = m;
  job.data.dataset = "synthetic";
  job.data.synthetic_shape = {1, 12, 12};
  job.data.synthetic_size = 512;
  job.data.batch_size = 16;
  job.data.eval_batches = 4;
  job.optimizer.kind = models::OptimizerKind::Sgd;
  job.optimizer.lr = 0.05;
  job.seed = 7;
  job.resources.threads = 1;
  try {
    train::run_job(job, out);
    return 0;
  } catch (const rpc::AbortedError& e) {
    std::fprintf(stderr, "tied_mlp_job: stopped: %s\n", e.what());
    return 5;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tied_mlp_job: error: %s\n", e.what());
    return 2;
  }
}
