// Pipeline benchmarks (print, never assert), one JSON line per figure:
//  (a) executor overhead: the measured step time against the simulator's makespan computed from
//      the op times measured in the same steps (target <= 1.05);
//  (b) real speedup: 2 stages on cpu:0 and cpu:1 (one thread each) against 1 stage on one thread,
//      M micro-batches, against the ideal 2M/(M+1) (target >= 90%);
//  (c) peak memory per stage with and without recomputation;
//  (d) the trace recorder's overhead: steps with tracing on and off, alternating (target <= 1%);
//  (e) every schedule on P = 2 and 4 stages (one thread each): the measured step time beside the
//      simulator's makespan from the op times measured in the same steps (target <= 1.05), and the
//      speed-up over 1F1B, measured and simulated.
//   build/bin/pipeline_bench [--steps N] [--micro-batches M] [--batch-size B] [--only schedules|overheads]
//                            [--models seed-cnn,resnet18]
#include <algorithm>
#include <cstdio>
#include <map>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/trace.h"
#include "kernels/runtime.h"
#include "models/data/dataset.h"
#include "partition/partitioners.h"
#include "partition/profile_partitioner.h"
#include "core/clock.h"
#include "pipeline/simulator.h"
#include "train/embedded_job.h"

using namespace pw;

namespace {

struct Measured {
  double median_step = 0.0;
  double last_step = 0.0;
  std::vector<pipeline::StageStepResult> stages;   // the last step's, per stage
  std::vector<std::int64_t> peaks;
};

// The job the engine runs for one measurement: the model split as given, one thread per stage.
train::JobConfig bench_job(const partition::ModelDescription& model, const partition::Partition& split,
                           const pipeline::ScheduleSpec& spec, const std::vector<kernels::Device>& devices,
                           const std::string& recompute, std::int64_t batch_size) {
  train::JobConfig c;
  c.program_model = model;
  c.data.dataset = "synthetic";
  c.data.batch_size = batch_size;
  c.pipeline.schedule = spec.kind;
  c.pipeline.stages = spec.stages;
  c.pipeline.micro_batches = spec.micro_batches;
  c.pipeline.chunks = spec.chunks;
  for (std::size_t i = 1; i < split.size(); ++i) c.pipeline.split.push_back(split[i].begin);
  c.pipeline.recompute = parse_enum<partition::Recompute>(recompute);
  c.resources.devices.assign(devices.begin(), devices.end());
  c.resources.threads = 1;
  c.optimizer.kind = models::OptimizerKind::Sgd;
  return c;
}

Measured run(const partition::ModelDescription& model, const partition::Partition& split, pipeline::ScheduleSpec spec,
             const std::vector<kernels::Device>& devices, const std::string& recompute,
             const models::data::Batch& batch, int steps) {
  for (const auto& d : devices) {
    auto& rt = kernels::DeviceRuntime::get(d);
    rt.allocator().release_cache();
    rt.allocator().reset_peak();
  }
  train::EmbeddedJob job(train::plan_job(bench_job(model, split, spec, devices, recompute, batch.labels.dim(0))));
  std::vector<double> times;
  Measured m;
  train::StepOutcome last;
  for (int i = 0; i < steps + 2; ++i) {
    const auto t0 = Clock::now();
    last = job.step(batch);
    m.last_step = seconds_since(t0);
    if (i >= 2) times.push_back(m.last_step);   // two warm-up steps
  }
  std::sort(times.begin(), times.end());
  m.median_step = times[times.size() / 2];
  m.peaks = last.stage_peak_memory;
  for (int s = 0; s < spec.stages; ++s) m.stages.push_back(job.engine(s).last_stage_result());
  return m;
}

// Per-micro-batch op times of each virtual stage, from what the stages measured.
pipeline::OpTimes measured_op_times(const pipeline::ScheduleSpec& spec, const std::vector<pipeline::StageStepResult>& stages) {
  const int pieces = spec.stages * spec.chunks;
  pipeline::OpTimes t = pipeline::OpTimes::uniform(spec, 0, 0, 0);
  const double m = spec.micro_batches;
  for (int s = 0; s < spec.stages; ++s) {
    const auto& ops = stages[static_cast<std::size_t>(s)].op_seconds;
    const auto get = [&](pipeline::OpType op, int c) {
      auto it = ops.find({op, c});
      return it == ops.end() ? 0.0 : it->second;
    };
    for (int c = 0; c < spec.chunks; ++c) {
      const auto v = static_cast<std::size_t>(pipeline::virtual_stage(spec, s, c));
      t.forward[v] = get(pipeline::OpType::Forward, c) / m;
      // Unsplit backwards count as the input half; the weight half is then zero.
      t.backward_input[v] = (get(pipeline::OpType::Backward, c) + get(pipeline::OpType::BackwardInput, c)) / m;
      t.backward_weight[v] = get(pipeline::OpType::BackwardWeight, c) / m;
      // The receiver's copy onto its device is the transfer from the neighbouring piece.
      // A V schedule's turn stays on its stage: no copy.
      if (v > 0) t.send_activation[v - 1] = get(pipeline::OpType::RecvActivation, c) / m;
      if (v + 1 < t.forward.size()) t.send_gradient[v + 1] = get(pipeline::OpType::RecvGradient, c) / m;
    }
    t.optimizer_step = std::max(t.optimizer_step, get(pipeline::OpType::OptimizerStep, 0));
  }
  (void)pieces;
  return t;
}

// (e): every schedule kind valid for P stages and M micro-batches, split by profiled layer times.
void bench_schedules(const partition::ModelDescription& model, const std::vector<partition::LayerProfile>& profiles,
                     int stages, int micro_batches, const models::data::Batch& batch, int steps) {
  std::vector<kernels::Device> devices;
  for (int s = 0; s < stages; ++s) devices.push_back(kernels::Device::cpu(s));
  double one_f_one_b_measured = 0.0, one_f_one_b_simulated = 0.0;
  for (const auto& name : enum_names<pipeline::ScheduleKind>()) {
    pipeline::ScheduleSpec spec{pipeline::parse_schedule_kind(name), stages, micro_batches, 1};
    spec.chunks = pipeline::default_chunks(spec.kind);
    nlohmann::json row = {{"bench", "schedule_step"}, {"model", model.name},       {"schedule", name},
                          {"stages", stages},         {"micro_batches", micro_batches}, {"chunks", spec.chunks}};
    try {
      pipeline::validate(spec);
      PW_INPUT_CHECK(model.layer_count() >= stages * spec.chunks,
                     model.layer_count() << " layers for " << stages * spec.chunks << " pieces");
      partition::CostModel cost;
      cost.stages = stages;
      cost.chunks = spec.chunks;
      cost.placement = pipeline::chunk_placement(spec.kind);
      cost.micro_batches = micro_batches;
      const auto split = partition::partition_by_profile(profiles, cost, model.name);
      const auto measured = run(model, split, spec, devices, "none", batch, steps);
      const auto sim = pipeline::simulate(spec, measured_op_times(spec, measured.stages));
      if (spec.kind == pipeline::ScheduleKind::OneFOneB) {
        one_f_one_b_measured = measured.median_step;
        one_f_one_b_simulated = sim.makespan;
      }
      row["measured_step_ms"] = measured.median_step * 1e3;
      row["simulated_makespan_ms"] = sim.makespan * 1e3;
      row["ratio"] = measured.last_step / sim.makespan;
      row["simulated_bubble"] = sim.bubble_fraction;
      if (one_f_one_b_measured > 0) {
        row["speedup_over_1f1b"] = one_f_one_b_measured / measured.median_step;
        row["simulated_speedup_over_1f1b"] = one_f_one_b_simulated / sim.makespan;
      }
    } catch (const InputError& e) {
      row["skipped"] = e.what();
    }
    std::printf("%s\n", row.dump().c_str());
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"pipeline benchmarks"};
  int steps = 10, micro_batches = 8;
  std::int64_t batch_size = 64;
  app.add_option("--steps", steps)->check(CLI::PositiveNumber);
  app.add_option("--micro-batches", micro_batches)->check(CLI::PositiveNumber);
  app.add_option("--batch-size", batch_size)->check(CLI::PositiveNumber);
  std::vector<std::string> model_names = {"seed-cnn", "resnet18"};
  app.add_option("--models", model_names, "zoo models to run")->delimiter(',');
  std::string only;
  app.add_option("--only", only, "run only the schedules section or only the others")
      ->check(CLI::IsMember({"schedules", "overheads"}));
  CLI11_PARSE(app, argc, argv);

  try {
    auto data = models::data::make_synthetic_images(batch_size, {1, 28, 28}, 10, 1);
    models::data::DataLoader loader(*data, batch_size, models::data::Shuffle::No, 0, models::data::LastBatch::Drop);
    loader.start_epoch(0);
    const auto batch = *loader.next();

    for (const std::string& name : model_names) {
      models::ModelOptions mo;
      mo.width = 32;
      const auto model = partition::describe(models::make_model_spec(name, mo));
      const pipeline::ScheduleSpec one{pipeline::ScheduleKind::OneFOneB, 1, micro_batches, 1};
      const pipeline::ScheduleSpec two{pipeline::ScheduleKind::OneFOneB, 2, micro_batches, 1};

      // Balance the two stages by measured layer times (one thread, as the stages run).
      kernels::DeviceRuntime::get(kernels::Device::cpu(0)).set_threads(1);
      const auto profiles = partition::profile_layers(
          model, kernels::Device::cpu(0), partition::job_profile_options(batch_size / micro_batches, micro_batches));
      partition::CostModel cost;
      cost.stages = 2;
      cost.micro_batches = micro_batches;
      const auto split2 = partition::partition_by_profile(profiles, cost, model.name);
      const partition::Partition split1 = {{0, model.layer_count()}};
      if (only != "overheads")
        for (int stages : {2, 4}) bench_schedules(model, profiles, stages, micro_batches, batch, steps);
      if (only == "schedules") continue;

      const auto base = run(model, split1, one, {kernels::Device::cpu(0)}, "none", batch, steps);
      const auto piped = run(model, split2, two, {kernels::Device::cpu(0), kernels::Device::cpu(1)}, "none", batch,
                             steps);
      const double ideal = 2.0 * micro_batches / (micro_batches + 1.0);
      const double speedup = base.median_step / piped.median_step;
      nlohmann::json speed = {{"bench", "pipeline_speedup"}, {"model", name}, {"micro_batches", micro_batches},
                              {"batch_size", batch_size}, {"split", split2[1].begin},
                              {"one_stage_step_ms", base.median_step * 1e3},
                              {"two_stage_step_ms", piped.median_step * 1e3}, {"speedup", speedup},
                              {"ideal", ideal}, {"fraction_of_ideal", speedup / ideal}};
      std::printf("%s\n", speed.dump().c_str());

      const auto sim = pipeline::simulate(two, measured_op_times(two, piped.stages));
      nlohmann::json overhead = {{"bench", "executor_overhead"}, {"model", name}, {"stages", 2},
                                 {"measured_step_ms", piped.last_step * 1e3},
                                 {"simulated_makespan_ms", sim.makespan * 1e3},
                                 {"ratio", piped.last_step / sim.makespan}};
      std::printf("%s\n", overhead.dump().c_str());

      const auto recomputed = run(model, split2, two, {kernels::Device::cpu(2), kernels::Device::cpu(3)},
                                  "all", batch, 2);
      nlohmann::json memory = {{"bench", "stage_peak_memory"}, {"model", name}, {"micro_batches", micro_batches},
                               {"recompute_none_bytes", piped.peaks}, {"recompute_all_bytes", recomputed.peaks},
                               {"recompute_all_step_ms", recomputed.median_step * 1e3}};
      std::printf("%s\n", memory.dump().c_str());
      std::fflush(stdout);

      {
        train::EmbeddedJob trainer(train::plan_job(
            bench_job(model, split2, two, {kernels::Device::cpu(0), kernels::Device::cpu(1)}, "none", batch_size)));
        auto& recorder = trace::Recorder::global();
        std::vector<double> off, on;
        for (int i = 0; i < 2 * steps + 2; ++i) {
          const bool traced = i % 2 == 1;
          if (traced) recorder.enable();
          else recorder.disable();
          const auto t0 = Clock::now();
          trainer.step(batch);
          if (i >= 2) (traced ? on : off).push_back(seconds_since(t0));
        }
        recorder.disable();
        const auto spans = recorder.snapshot().size();
        recorder.clear();
        std::sort(off.begin(), off.end());
        std::sort(on.begin(), on.end());
        const double a = off[off.size() / 2], b = on[on.size() / 2];
        nlohmann::json overhead_trace = {{"bench", "trace_overhead"}, {"model", name}, {"stages", 2},
                                         {"untraced_step_ms", a * 1e3}, {"traced_step_ms", b * 1e3},
                                         {"spans_per_step", spans / on.size()}, {"overhead", b / a - 1.0}};
        std::printf("%s\n", overhead_trace.dump().c_str());
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pipeline_bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
