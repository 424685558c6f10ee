// Data-parallel benchmarks (print, never assert), one JSON line per figure:
//  (a) bucketed gradient all-reduce (BucketReducer, the bytes of a model's parameters) against one
//      plain Gloo all-reduce of the same bytes, two replicas as threads over loopback (target:
//      overhead <= 10%);
//  (b) step time of 2 replicas x 2 stages, 1 x 4 (pipeline only) and 4 x 1 (data parallel only) on
//      the same model and global batch, each beside a prediction: the simulator's makespan from
//      layer times profiled on one thread, plus the all-reduce time measured in (a) for the
//      largest stage's gradient bytes (no overlap assumed, so an upper bound);
//  (c) the job's links against Gloo: one all-reduce of the same bytes by 2 ranks on loopback,
//      LinkCollective over the Thrift transport (what a job spanning hosts uses, every frame
//      carrying the job token) beside GlooCollective, alternating, with both bandwidths and the
//      ratio; each result is checked (a wrong sum is an error, as nccl-tests do).
//   build/bin/dp_bench [--model resnet18] [--width 16] [--batch-size 64] [--steps 5] [--links-only]
#include <algorithm>
#include <cstdio>
#include <random>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench/stats.h"
#include "core/clock.h"
#include "dataparallel/bucket_reducer.h"
#include "dataparallel/gloo_collective.h"
#include "dataparallel/link_collective.h"
#include "dataparallel/run_per_rank.h"
#include "kernels/runtime.h"
#include "models/data/dataset.h"
#include "partition/cost_model.h"
#include "partition/partitioners.h"
#include "partition/profile_partitioner.h"
#include "partition/profiler.h"
#include "pipeline/planner.h"
#include "rpc/job_token.h"
#include "rpc/thrift_transport.h"
#include "train/embedded_job.h"

using namespace pw;
using pw::bench::median;
using namespace std::chrono_literals;

namespace {


// Gradients shaped like the model's parameters, random, one set per replica.
std::vector<std::vector<std::unique_ptr<models::Parameter>>> fake_gradients(const std::vector<std::int64_t>& sizes,
                                                                             int replicas) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<std::vector<std::unique_ptr<models::Parameter>>> out(static_cast<std::size_t>(replicas));
  for (auto& set : out)
    for (auto n : sizes) {
      auto p = std::make_unique<models::Parameter>();
      std::vector<float> g(static_cast<std::size_t>(n));
      for (auto& x : g) x = u(rng);
      p->grad = kernels::Tensor::from_vector(g, {n});
      set.push_back(std::move(p));
    }
  return out;
}

// Median seconds of `reps` runs of `op(member)` on every member at once.
double timed(int members, int reps, const std::function<void(int)>& op) {
  std::vector<double> times;
  for (int i = 0; i < reps + 1; ++i) {
    const auto t0 = Clock::now();
    dp::run_per_rank(members, op);
    if (i > 0) times.push_back(seconds_since(t0));   // the first run connects and warms up
  }
  return median(times);
}

// The engine's job for one shape: the model split as given, one thread per rank on cpu:0..N-1.
train::JobConfig job_for(const std::string& model_name, int width, const partition::Partition& split, int stages,
                         int micro_batches, int replicas, std::int64_t batch_size) {
  train::JobConfig c;
  c.model.name = model_name;
  c.model.width = width;
  c.data.dataset = "synthetic";
  c.data.batch_size = batch_size;
  c.pipeline.stages = stages;
  c.pipeline.micro_batches = micro_batches;
  for (std::size_t i = 1; i < split.size(); ++i) c.pipeline.split.push_back(split[i].begin);
  c.replicas.replicas = replicas;
  for (int d = 0; d < stages * replicas; ++d) c.resources.devices.push_back(kernels::Device::cpu(d));
  c.resources.threads = 1;
  c.optimizer.kind = models::OptimizerKind::Sgd;
  return c;
}

// Two Thrift transports on loopback, told each other's ports, as a world of processes has them.
std::vector<std::unique_ptr<rpc::ThriftTransport>> thrift_pair() {
  const std::string token = rpc::make_job_token();
  const std::vector<std::string> any_port(2, "127.0.0.1:0");
  std::vector<std::unique_ptr<rpc::ThriftTransport>> ranks;
  for (int r = 0; r < 2; ++r) ranks.push_back(std::make_unique<rpc::ThriftTransport>(r, 2, any_port, token));
  for (auto& self : ranks)
    for (int peer = 0; peer < 2; ++peer) self->set_peer_address(peer, ranks[static_cast<std::size_t>(peer)]->address());
  return ranks;
}

// (c): Gloo and the links, alternating, on the same bytes; every result checked.
void links_against_gloo(const std::vector<std::int64_t>& sizes, int reps, std::int64_t chunk_bytes) {
  rpc::InMemoryStore store;
  std::vector<std::unique_ptr<dp::Collective>> gloo(2), links(2);
  dp::run_per_rank(2, [&](int r) {
    gloo[static_cast<std::size_t>(r)] =
        std::make_unique<dp::GlooCollective>(r, 2, store, "links-vs-gloo/", "127.0.0.1", 60000ms);
  });
  auto thrift = thrift_pair();
  for (int r = 0; r < 2; ++r)
    links[static_cast<std::size_t>(r)] =
        std::make_unique<dp::LinkCollective>(*thrift[static_cast<std::size_t>(r)], std::vector<int>{0, 1},
                                             "links-vs-gloo/", 60000ms, dp::LinkCollectiveOptions{chunk_bytes});
  for (const std::int64_t elements : sizes) {
    const double bytes = static_cast<double>(elements) * 4.0;
    const int runs = std::max(3, std::min(reps, static_cast<int>(2e9 / std::max(bytes, 1.0))));
    std::vector<kernels::Tensor> data = {kernels::Tensor::full({elements}, 1.0),
                                         kernels::Tensor::full({elements}, 1.0)};
    std::vector<double> gloo_times, link_times;
    // Every member starts from ones: every element must come out 2, exactly.
    auto check = [&](double expected) {
      for (auto& t : data) {
        const float* v = t.data<float>();
        for (std::int64_t i = 0; i < elements; i += std::max<std::int64_t>(1, elements / 97))
          if (v[i] != static_cast<float>(expected))
            throw Error("links against gloo: element " + std::to_string(i) + " is " + std::to_string(v[i]) +
                        ", expected " + std::to_string(expected));
      }
    };
    auto once = [&](std::vector<std::unique_ptr<dp::Collective>>& group) {
      for (auto& t : data) std::fill_n(t.data<float>(), elements, 1.0f);
      const auto t0 = Clock::now();
      dp::run_per_rank(2, [&](int r) {
        const auto m = static_cast<std::size_t>(r);
        group[m]->allreduce_sum(data[m], dp::Compression::None);
      });
      const double seconds = seconds_since(t0);
      check(2.0);
      return seconds;
    };
    for (int i = 0; i < runs + 1; ++i) {   // the first of each warms up
      const double g = once(gloo);
      const double l = once(links);
      if (i > 0) {
        gloo_times.push_back(g);
        link_times.push_back(l);
      }
    }
    const double g = median(gloo_times), l = median(link_times);
    std::printf("%s\n", nlohmann::json{{"bench", "allreduce_links_vs_gloo"}, {"ranks", 2}, {"bytes", bytes},
                                       {"runs", runs}, {"link_chunk_bytes", chunk_bytes},
                                       {"gloo_ms", g * 1e3}, {"links_ms", l * 1e3},
                                       {"gloo_MBps", bytes / g / 1e6}, {"links_MBps", bytes / l / 1e6},
                                       {"links_over_gloo_time", l / g}}
                            .dump()
                            .c_str());
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"data-parallel benchmarks"};
  std::string model_name = "resnet18";
  int width = 16, steps = 5, reps = 31;
  std::int64_t batch_size = 64;
  app.add_option("--model", model_name);
  app.add_option("--width", width)->check(CLI::PositiveNumber);
  app.add_option("--batch-size", batch_size)->check(CLI::PositiveNumber);
  app.add_option("--steps", steps)->check(CLI::PositiveNumber);
  app.add_option("--reps", reps)->check(CLI::PositiveNumber);
  bool links_only = false;
  std::int64_t link_chunk = std::int64_t{1} << 20;
  app.add_flag("--links-only", links_only, "only (c): the job's links against Gloo");
  app.add_option("--link-chunk", link_chunk, "bytes of one link message")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  try {
    models::ModelOptions mo;
    mo.width = width;
    const auto spec = models::make_model_spec(model_name, mo);
    const auto model = partition::describe(spec);
    auto whole = models::build_model(spec, 0);
    std::vector<std::int64_t> sizes;
    for (auto* p : whole->parameters()) sizes.push_back(p->value.numel());
    std::int64_t elements = 0;
    for (auto n : sizes) elements += n;
    const double bytes = static_cast<double>(elements) * 4.0;

    // (c) first: it needs no model time.
    links_against_gloo({std::int64_t{1} << 10, std::int64_t{1} << 16, std::int64_t{1} << 20, elements,
                        std::int64_t{1} << 24},
                       reps, link_chunk);
    if (links_only) return 0;

    // (a) bucketed against one plain all-reduce of the same bytes.
    rpc::InMemoryStore store;
    std::vector<std::shared_ptr<dp::GlooCollective>> group(2);
    dp::run_per_rank(2, [&](int r) {
      group[r] = std::make_shared<dp::GlooCollective>(r, 2, store, "bench/", "127.0.0.1", 60000ms);
    });
    std::vector<kernels::Tensor> flat = {kernels::Tensor::full({elements}, 1.0), kernels::Tensor::full({elements}, 2.0)};
    const double plain = timed(2, reps, [&](int r) { group[r]->allreduce_sum(flat[r], dp::Compression::None); });
    std::printf("%s\n", nlohmann::json{{"bench", "allreduce_plain_gloo"}, {"model", model_name}, {"bytes", bytes},
                                       {"ms", plain * 1e3}, {"MBps", bytes / plain / 1e6}}
                            .dump()
                            .c_str());
    {
      // The same bytes in three plain calls: what any bucketing into three pieces costs at least.
      const std::int64_t third = elements / 3;
      std::vector<kernels::Tensor> parts = {kernels::Tensor::full({third}, 1.0), kernels::Tensor::full({third}, 2.0)};
      const double three = timed(2, reps, [&](int r) {
        for (int i = 0; i < 3; ++i) group[r]->allreduce_sum(parts[r], dp::Compression::None);
      });
      std::printf("%s\n", nlohmann::json{{"bench", "allreduce_plain_gloo_three_calls"}, {"bytes", bytes},
                                         {"ms", three * 1e3}, {"plain_gloo_ms", plain * 1e3}}
                              .dump()
                              .c_str());
    }
    for (std::size_t bucket : {std::size_t{1} << 20, std::size_t{25} << 20})
      for (auto compression : {dp::Compression::None, dp::Compression::Fp16}) {
        auto grads = fake_gradients(sizes, 2);
        std::vector<std::unique_ptr<dp::BucketReducer>> reducers;
        for (int r = 0; r < 2; ++r) {
          std::vector<models::Parameter*> ps;
          for (auto& p : grads[static_cast<std::size_t>(r)]) ps.push_back(p.get());
          reducers.push_back(std::make_unique<dp::BucketReducer>(ps, group[r], dp::BucketOptions{bucket, compression}));
        }
        // Plain and bucketed alternate, so both see the same machine load.
        std::vector<double> plain_times, bucket_times;
        for (int i = 0; i < reps; ++i) {
          plain_times.push_back(timed(2, 1, [&](int r) { group[r]->allreduce_sum(flat[r], dp::Compression::None); }));
          bucket_times.push_back(timed(2, 1, [&](int r) {
            reducers[r]->start_step(0);
            reducers[r]->finish(std::chrono::steady_clock::now() + 60s);
          }));
        }
        const double t = median(bucket_times);
        const double plain_here = median(plain_times);
        std::printf("%s\n", nlohmann::json{{"bench", "allreduce_bucketed"}, {"model", model_name}, {"bytes", bytes},
                                           {"bucket_bytes", bucket}, {"buckets", reducers[0]->bucket_count()},
                                           {"compression", dp::compression_name(compression)}, {"ms", t * 1e3},
                                           {"plain_gloo_ms", plain_here * 1e3}, {"overhead", t / plain_here - 1.0},
                                           {"last_reduce_thread_ms", reducers[0]->stats().reduce_seconds * 1e3}}
                                .dump()
                                .c_str());
        std::fflush(stdout);
      }

    // (b) three ways to use four ranks on the same global batch.
    auto data = models::data::make_synthetic_images(batch_size, spec.sample_shape, 10, 1);
    models::data::DataLoader loader(*data, batch_size, models::data::Shuffle::No, 0, models::data::LastBatch::Drop);
    loader.start_epoch(0);
    const auto batch = *loader.next();
    for (int d = 0; d < 4; ++d) kernels::DeviceRuntime::get(kernels::Device::cpu(d)).set_threads(1);
    const int micro_batches = 4;
    const auto profiles = partition::profile_layers(
        model, kernels::Device::cpu(0), partition::job_profile_options(batch_size / micro_batches, micro_batches));
    struct Shape {
      int replicas, stages;
    };
    for (const Shape s : {Shape{2, 2}, Shape{1, 4}, Shape{4, 1}}) {
      const int m = s.replicas == 4 ? 1 : (s.replicas == 2 ? 2 : micro_batches);   // same micro-batch size
      partition::CostModel cost;
      cost.stages = s.stages;
      cost.micro_batches = m;
      const auto split = s.stages == 1 ? partition::Partition{{0, model.layer_count()}}
                                       : partition::partition_by_profile(profiles, cost, model.name);
      const pipeline::ScheduleSpec schedule{pipeline::ScheduleKind::OneFOneB, s.stages, m, 1};
      const auto pieces = partition::estimate_stages(profiles, cost, split);
      const double compute = pipeline::simulate(schedule, pipeline::op_times(schedule, pieces)).makespan;
      double stage_bytes = 0.0;
      for (const auto& range : split) {
        double b = 0.0;
        for (int l = range.begin; l < range.end; ++l) b += static_cast<double>(profiles[static_cast<std::size_t>(l)].param_bytes);
        stage_bytes = std::max(stage_bytes, b);
      }
      const double reduce = s.replicas > 1 ? plain * stage_bytes / bytes : 0.0;
      train::EmbeddedJob trainer(
          train::plan_job(job_for(model_name, width, split, s.stages, m, s.replicas, batch_size)));
      std::vector<double> times;
      for (int i = 0; i < steps + 2; ++i) {
        const auto t0 = Clock::now();
        trainer.step(batch);
        if (i >= 2) times.push_back(seconds_since(t0));
      }
      std::printf("%s\n", nlohmann::json{{"bench", "hybrid_step"}, {"model", model_name}, {"replicas", s.replicas},
                                         {"stages", s.stages}, {"micro_batches", m}, {"batch_size", batch_size},
                                         {"step_ms", median(times) * 1e3},
                                         {"predicted_step_ms", (compute + reduce) * 1e3},
                                         {"predicted_compute_ms", compute * 1e3},
                                         {"predicted_allreduce_ms", reduce * 1e3}}
                              .dump()
                              .c_str());
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dp_bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
