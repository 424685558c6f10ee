// Memory per parameter with and without --shard-optimizer (prints, never asserts), one JSON line
// per figure:
//  (a) bytes of model state per parameter on one rank (the allocator's peak_by_kind of rank 0:
//      parameters + gradients + master weights + optimizer state, over the stage's parameters)
//      for R = 1, 2, 4 replicas, fp32 and bf16 Adam, replicated and sharded, beside
//      Megatron-Core's distributed-optimizer formulas (fp32: 16 → 8 + 8/R; bf16: 18 → 6 + 12/R);
//  (b) the step time of the sharded job against the plain all-reduce job, alternated in this run
//      (median of each step after the first, over `--rounds` runs of each), with the ratio
//      (issue 27's target: sharded / plain <= 1.05).
// The model is an MLP of wide linear layers on one stage (their weights dominate; biases, which
// stay fp32 without masters, are 1/width of them), ranks as threads on CPU devices.
//   build/bin/memory_bench [--width 1024] [--layers 4] [--batch-size 32] [--steps 6] [--rounds 2]
//                      [--precision fp32 bf16] [--replicas 1 2 4] [--cpu-collectives auto]
// MEMORY_BENCH_TRACE=PREFIX writes each job's Chrome trace to PREFIX.<precision>.<state>.json.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench/stats.h"
#include "kernels/runtime.h"
#include "models/layers/linear.h"
#include "models/layers/simple.h"
#include "partition/model_description.h"
#include "pipewright/fit.h"
#include "train/job_config.h"

using namespace pw;
using pw::bench::median;

namespace {

struct Options {
  int width = 1024;
  int layers = 4;
  std::int64_t batch_size = 32;
  int steps = 6;
  int rounds = 2;
  std::vector<std::string> precisions{"fp32", "bf16"};
  std::vector<int> replica_counts{1, 2, 4};
  std::string collectives = "auto";
};

// flatten, then `layers` Linear(width, width) with ReLUs between, on 1 x width-long inputs.
partition::ModelDescription wide_mlp(const Options& o) {
  partition::ModelDescription m;
  m.name = "wide-mlp";
  m.sample_shape = {1, 1, o.width};
  m.num_classes = 10;
  m.layers.push_back({"flatten", [] { return std::unique_ptr<models::Layer>(std::make_unique<models::Flatten>()); }});
  for (int i = 0; i < o.layers; ++i) {
    if (i > 0)
      m.layers.push_back({"relu" + std::to_string(i), [] { return std::unique_ptr<models::Layer>(std::make_unique<models::ReLU>()); }});
    const int out = i + 1 == o.layers ? 10 : o.width;
    m.layers.push_back({"fc" + std::to_string(i), [w = o.width, out] {
                          return std::unique_ptr<models::Layer>(std::make_unique<models::Linear>(w, out));
                        }});
  }
  return m;
}

struct Run {
  std::vector<double> step_seconds;        // after the first step
  train::RankMemory rank0;                 // rank 0's peak by kind, after the last step
  std::int64_t parameters = 0;
};

Run run(const Options& o, int replicas, models::Precision precision, dp::OptimizerState state) {
  train::JobConfig c;
  c.program_model = wide_mlp(o);
  c.data.dataset = "synthetic";
  c.data.synthetic_shape = c.program_model->sample_shape;
  c.data.synthetic_size = o.batch_size * o.steps;
  c.data.batch_size = o.batch_size;
  c.data.steps = o.steps;
  c.data.eval_batches = 1;
  c.pipeline.stages = 1;
  c.pipeline.micro_batches = 1;
  c.replicas.replicas = replicas;
  c.replicas.optimizer_state = state;
  c.replicas.cpu_collectives = parse_enum<dp::CpuCollectives>(o.collectives);
  for (int r = 0; r < replicas; ++r) c.resources.devices.push_back(kernels::Device::cpu(r));
  c.resources.threads = 1;
  c.optimizer.kind = models::OptimizerKind::Adam;
  c.optimizer.lr = 1e-3;
  c.numerics.precision = precision;
  c.timeouts.stage_seconds = 120;
  // A fresh cache on every device: a larger cached block (up to twice the size asked for) would otherwise
  // serve (and count for) a smaller tensor of this run.
  for (int r = 0; r < 4; ++r) kernels::DeviceRuntime::get(kernels::Device::cpu(r)).allocator().release_cache();
  Run out;
  train::FitOptions fit;
  fit.progress = false;
  if (const char* t = std::getenv("MEMORY_BENCH_TRACE")) fit.trace_path = std::string(t) + "." + std::string(enum_name(precision)) + "." + std::string(enum_name(state)) + ".json";
  train::FitCallbacks callbacks;
  callbacks.on_step = [&](const train::StepEvent& e) {
    if (e.step > 1) out.step_seconds.push_back(e.seconds);
    out.rank0 = e.outcome->rank_memory.front();
  };
  const auto summary = train::run_job(c, fit, callbacks);
  out.parameters = summary.at("params").get<std::int64_t>();
  return out;
}

// Megatron-Core's bytes per parameter (docs: distributed optimizer), d data-parallel replicas.
double megatron_bytes(models::Precision precision, dp::OptimizerState state, int d) {
  const bool sharded = state == dp::OptimizerState::Sharded;
  if (precision == models::Precision::Fp32) return sharded ? 8.0 + 8.0 / d : 16.0;
  return sharded ? 6.0 + 12.0 / d : 18.0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"bytes per parameter and step time with and without a sharded optimizer"};
  app.add_option("--width", o.width, "linear layers' width")->check(CLI::Range(16, 8192));
  app.add_option("--layers", o.layers, "linear layers")->check(CLI::Range(1, 64));
  app.add_option("--batch-size", o.batch_size, "global batch")->check(CLI::Range(4, 4096));
  app.add_option("--steps", o.steps, "steps per run (the first is not timed)")->check(CLI::Range(2, 1000));
  app.add_option("--rounds", o.rounds, "runs of each job for the step-time comparison")->check(CLI::Range(1, 20));
  app.add_option("--precision", o.precisions, "precisions to run (fp32, bf16)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--replicas", o.replica_counts, "replica counts to run")->check(CLI::Range(1, 4));
  app.add_option("--cpu-collectives", o.collectives, "the replicas' collectives (auto, gloo, links)")
      ->check(CLI::IsMember({"auto", "gloo", "links"}));
  CLI11_PARSE(app, argc, argv);
  try {
    using models::Precision;
    using dp::OptimizerState;
    for (const auto& precision_name : o.precisions) {
      const auto precision = precision_name == "fp32" ? Precision::Fp32 : Precision::Bf16;
      for (const int replicas : o.replica_counts) {
        std::vector<double> plain_seconds, sharded_seconds;
        for (int round = 0; round < o.rounds; ++round) {
          for (const auto state : {OptimizerState::Replicated, OptimizerState::Sharded}) {
            const auto r = run(o, replicas, precision, state);
            auto& seconds = state == OptimizerState::Sharded ? sharded_seconds : plain_seconds;
            seconds.insert(seconds.end(), r.step_seconds.begin(), r.step_seconds.end());
            if (round > 0) continue;
            const auto& m = r.rank0;
            const auto n = static_cast<double>(r.parameters);
            const double state_bytes =
                static_cast<double>(m.parameters + m.gradients + m.master_weights + m.optimizer_state);
            nlohmann::json j = {{"figure", "bytes_per_parameter"},
                                {"precision", enum_name(precision)},
                                {"optimizer_state", enum_name(state)},
                                {"replicas", replicas},
                                {"parameters", r.parameters},
                                {"measured", state_bytes / n},
                                {"megatron", megatron_bytes(precision, state, replicas)},
                                {"by_kind_per_parameter",
                                 {{"parameters", static_cast<double>(m.parameters) / n},
                                  {"gradients", static_cast<double>(m.gradients) / n},
                                  {"master_weights", static_cast<double>(m.master_weights) / n},
                                  {"optimizer_state", static_cast<double>(m.optimizer_state) / n}}},
                                {"peak_bytes_per_parameter", static_cast<double>(m.peak_bytes) / n}};
            std::printf("%s\n", j.dump().c_str());
          }
        }
        if (replicas == 1) continue;   // one replica: nothing is sharded, the jobs are the same
        const double plain = median(plain_seconds), sharded = median(sharded_seconds);
        nlohmann::json j = {{"figure", "step_time"},
                            {"precision", enum_name(precision)},
                            {"replicas", replicas},
                            {"plain_allreduce_ms", plain * 1e3},
                            {"sharded_ms", sharded * 1e3},
                            {"ratio", sharded / plain},
                            {"cpu_collectives", o.collectives},
                            {"target", 1.05},
                            {"steps_each", plain_seconds.size()}};
        std::printf("%s\n", j.dump().c_str());
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "memory_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
