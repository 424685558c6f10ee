// The layout search as a library call for a program's own model (not a zoo name), the memory
// formula it checks layouts with, and the step time of ranks that share the host's cores.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <set>
#include <tuple>

#include "tests/train/job_test_util.h"
#include "train/layout_search.h"
#include "train/link_calibration.h"
#include "train/memory_prediction.h"

namespace pw::train {
namespace {

using kernels::MemoryKind;

std::int64_t kind(const kernels::BytesByKind& bytes, MemoryKind k) { return bytes[static_cast<std::size_t>(k)]; }

partition::ModelDescription wide_mlp() {
  return test::mlp_of("wide-mlp",
                      {{"flatten", 0, 0}, {"fc1", 144, 256}, {"relu1", 0, 0}, {"fc2", 256, 256}, {"relu2", 0, 0},
                       {"fc3", 256, 256}, {"relu3", 0, 0}, {"fc4", 256, 10}},
                      {});
}

JobConfig base_job() {
  JobConfig job = test::job_of(wide_mlp(), test::JobShape{}, 32);
  job.resources.devices.clear();
  job.optimizer.kind = models::OptimizerKind::Adam;
  return job;
}

void check_ranked(const SearchResult& result, std::int64_t cap, int devices) {
  for (std::size_t i = 0; i < result.fitting.size(); ++i) {
    const auto& l = result.fitting[i];
    BOOST_TEST_CONTEXT(describe_layout(l.config)) {
      BOOST_CHECK(l.prediction.fits());
      if (cap > 0) BOOST_CHECK_LE(l.prediction.peak_bytes(), cap);
      BOOST_CHECK_LE(l.config.pipeline.stages * l.config.replicas.replicas, devices);
      if (i > 0) BOOST_CHECK_LE(result.fitting[i - 1].prediction.step_seconds, l.prediction.step_seconds);
      // Each is a job the engine accepts, with the split the search chose.
      const auto plan = plan_job(l.config);
      BOOST_CHECK_EQUAL(plan.schedule.stages, l.config.pipeline.stages);
      BOOST_CHECK_EQUAL(l.prediction.partition.size(), static_cast<std::size_t>(plan.schedule.stages * plan.schedule.chunks));
    }
  }
}

// The prediction of wide_mlp as `stages` x `replicas` (4 micro-batches, `threads` a rank, split
// evenly) with every layer's forward 1 ms and backward 2 ms, and with co-runners beside it
// `beside` times those (0: not measured): fixed times, so that the prediction, not the machine, is
// under test.
LayoutPrediction fixed_time_prediction(const LayerProfiler& measured, int stages, int replicas, int threads,
                                       const LinkSpeeds& links, double beside = 0.0) {
  test::JobShape shape;
  shape.stages = stages;
  shape.micro_batches = 4;
  shape.replicas = replicas;
  JobConfig job = test::job_of(wide_mlp(), shape, 16 * replicas);
  job.resources.threads = threads;
  const JobPlan plan = plan_job(job);
  auto layers = measured(plan, micro_batch_size_of(plan));
  for (auto& l : layers) {
    l.forward_seconds = 1e-3;
    l.backward_seconds = 2e-3;
    l.co_run_forward_seconds = beside * l.forward_seconds;
    l.co_run_backward_seconds = beside * l.backward_seconds;
  }
  return predict_layout(plan, layers, partition::partition_uniform(plan.model.layer_count(), stages), links);
}

double fixed_time_step(const LayerProfiler& measured, int stages, int replicas, int threads, const LinkSpeeds& links) {
  return fixed_time_prediction(measured, stages, replicas, threads, links).step_seconds;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(layout_search)

BOOST_AUTO_TEST_CASE(a_programs_own_model_is_searched_and_a_cap_keeps_only_what_fits) {
  const auto profiler = profile_on(kernels::Device::cpu(0), 1, 0, LinkSpeeds{});
  SearchSpace space;
  space.devices = 4;
  const auto open = search_layouts(base_job(), space, LinkSpeeds{}, profiler);
  BOOST_REQUIRE_GT(open.fitting.size(), 10u);
  BOOST_CHECK_EQUAL(open.considered, static_cast<int>(open.fitting.size()));
  check_ranked(open, 0, 4);

  std::vector<std::int64_t> peaks;
  for (const auto& l : open.fitting) peaks.push_back(l.prediction.peak_bytes());
  std::sort(peaks.begin(), peaks.end());
  BOOST_REQUIRE_LT(peaks.front(), peaks.back());
  space.device_memory = peaks[peaks.size() / 2];
  const auto capped = search_layouts(base_job(), space, LinkSpeeds{}, profiler);
  BOOST_CHECK_GT(capped.fitting.size(), 0u);
  BOOST_CHECK_LT(capped.fitting.size(), open.fitting.size());
  check_ranked(capped, space.device_memory, 4);
  for (const auto& l : capped.fitting) BOOST_CHECK_EQUAL(l.config.resources.device_memory, space.device_memory);

  space.device_memory = peaks.front() / 4;
  const auto none = search_layouts(base_job(), space, LinkSpeeds{}, profiler);
  BOOST_CHECK(none.fitting.empty());
  BOOST_CHECK_GT(none.smallest_peak, space.device_memory);
}

// AdaPipe's per-stage choice: without a cap nothing recomputes; under caps below the largest peaks,
// some layouts fit only when some of their stages recompute, and the search turns it on for those
// and not for the others, and only for layouts that do not fit without it: chosen layers where
// they suffice (some layouts do), whole stages where they do not. The layers' times are
// fixed (their memory is measured), so the splits, and what fits, do not depend on the machine.
BOOST_AUTO_TEST_CASE(recomputation_is_chosen_per_stage_only_where_a_layout_would_not_fit) {
  const auto measured = profile_on(kernels::Device::cpu(0), 1, 0, LinkSpeeds{});
  const LayerProfiler profiler = [measured](const JobPlan& plan, std::int64_t micro_batch_size) {
    auto layers = measured(plan, micro_batch_size);
    for (auto& l : layers) {
      l.forward_seconds = 1e-4 * static_cast<double>(micro_batch_size) * (1.0 + static_cast<double>(l.parameters) / 1e4);
      l.backward_seconds = 2.0 * l.forward_seconds;
    }
    return layers;
  };
  SearchSpace space;
  space.devices = 4;
  space.schedules = {pipeline::ScheduleKind::GPipe, pipeline::ScheduleKind::OneFOneB};
  space.offload = {models::OptimizerOffload::None};
  const auto open = search_layouts(base_job(), space, LinkSpeeds{}, profiler);
  std::int64_t largest = 0;
  for (const auto& l : open.fitting) {
    BOOST_TEST_CONTEXT(describe_layout(l.config)) {
      BOOST_CHECK(l.config.pipeline.recompute == partition::Recompute::None);
      BOOST_CHECK(l.config.pipeline.recompute_stages.empty());
    }
    largest = std::max(largest, l.prediction.peak_bytes());
  }
  const auto key = [](const JobConfig& c) {
    return std::tuple(c.pipeline.stages, c.replicas.replicas, c.pipeline.micro_batches, c.pipeline.schedule,
                      c.replicas.optimizer_state);
  };
  int selective = 0;
  for (const double fraction : {0.6, 0.4, 0.3}) {
    space.device_memory = static_cast<std::int64_t>(fraction * static_cast<double>(largest));
    const auto chosen = search_layouts(base_job(), space, LinkSpeeds{}, profiler);
    check_ranked(chosen, space.device_memory, 4);
    SearchSpace without = space;
    without.recompute_search = RecomputeSearch::Fixed;
    without.recompute = {partition::Recompute::None};
    const auto plain = search_layouts(base_job(), without, LinkSpeeds{}, profiler);
    without.recompute = {partition::Recompute::All};
    const auto whole = search_layouts(base_job(), without, LinkSpeeds{}, profiler);
    for (const auto& l : chosen.fitting) {
      BOOST_TEST_CONTEXT(describe_layout(l.config) << " under " << space.device_memory) {
        const bool fits_without = std::any_of(plain.fitting.begin(), plain.fitting.end(),
                                              [&](const RankedLayout& p) { return key(p.config) == key(l.config); });
        const auto& per_stage = l.config.pipeline.recompute_stages;
        const auto& layers = l.config.pipeline.recompute_layers;
        const bool recomputes = !per_stage.empty() || l.config.pipeline.recompute != partition::Recompute::None ||
                                !layers.empty();
        BOOST_CHECK_EQUAL(recomputes, !fits_without);
        if (!layers.empty()) {
          // Chosen layers (Megatron's selective recomputation) where they make the stage fit: the
          // plan runs them, the pieces holding them re-run their forwards in the backward, and the
          // layout is no slower than the same layout recomputing every stage whole.
          ++selective;
          const auto plan = plan_job(l.config);
          BOOST_CHECK(plan.recompute_layers == std::set<std::string>(layers.begin(), layers.end()));
          BOOST_CHECK(to_json(l.config)["pipeline"]["recompute_layers"] == nlohmann::json(layers));
          BOOST_CHECK(describe_layout(l.config).find("layers " + layers.front()) != std::string::npos);
          double rebuilt = 0.0;
          for (const auto& piece : l.prediction.pieces)
            if (!piece.recomputes) rebuilt += piece.rebuild_seconds;
          BOOST_CHECK_GT(rebuilt, 0.0);
          for (const auto& w : whole.fitting)
            if (key(w.config) == key(l.config)) BOOST_CHECK_LE(l.prediction.step_seconds, w.prediction.step_seconds);
        }
        if (per_stage.empty()) continue;
        BOOST_REQUIRE_EQUAL(per_stage.size(), static_cast<std::size_t>(l.config.pipeline.stages));
        // The prediction recomputes exactly the chosen stages' pieces, and the plan runs them so.
        const auto plan = plan_job(l.config);
        for (const auto& piece : l.prediction.pieces) {
          const auto want = per_stage[static_cast<std::size_t>(piece.device)];
          BOOST_CHECK_EQUAL(piece.recomputes, want == partition::Recompute::All);
          BOOST_CHECK(plan.recompute_of(piece.device) == want);
        }
        BOOST_CHECK(to_json(l.config)["pipeline"]["recompute"].is_array());
      }
    }
  }
  BOOST_CHECK_GT(selective, 0);
}

BOOST_AUTO_TEST_CASE(a_search_space_without_devices_is_refused) {
  SearchSpace space;
  space.devices = 0;
  BOOST_CHECK_THROW(search_layouts(base_job(), space, LinkSpeeds{}, profile_on(kernels::Device::cpu(0), 1, 0, LinkSpeeds{})),
                    InputError);
  space.devices = 4;
  space.nodes = 3;
  BOOST_CHECK_THROW(search_layouts(base_job(), space, LinkSpeeds{}, profile_on(kernels::Device::cpu(0), 1, 0, LinkSpeeds{})),
                    InputError);
}

// Bytes per parameter as the engine holds them (Megatron's table): fp32 Adam 4 + 4 + 8; bf16 adds
// 4 of fp32 master and keeps 2 of copy; sharded over R, each replica keeps 8/R of Adam's state
// (and, in bf16, 4/R of master); offloaded, neither state nor masters are on the device.
BOOST_AUTO_TEST_CASE(weight_memory_follows_precision_optimizer_and_sharding) {
  partition::LayerProfile layer;
  layer.parameter_tensor_bytes = {4 << 20};   // a 1M-parameter weight, in one 4 MiB block
  layer.copied_tensor_bytes = {4 << 20};
  const std::vector<const partition::LayerProfile*> layers{&layer};
  MemorySettings fp32;
  const auto a = weight_memory(layers, fp32);
  BOOST_CHECK_EQUAL(kind(a, MemoryKind::Parameters), 4 << 20);
  BOOST_CHECK_EQUAL(kind(a, MemoryKind::Gradients), 4 << 20);
  BOOST_CHECK_EQUAL(kind(a, MemoryKind::OptimizerState), 8 << 20);
  BOOST_CHECK_EQUAL(kind(a, MemoryKind::MasterWeights), 0);
  MemorySettings bf16 = fp32;
  bf16.precision = models::Precision::Bf16;
  const auto b = weight_memory(layers, bf16);
  BOOST_CHECK_EQUAL(kind(b, MemoryKind::MasterWeights), 4 << 20);
  BOOST_CHECK_EQUAL(kind(b, MemoryKind::Parameters), 2 << 20);
  BOOST_CHECK_EQUAL(kind(b, MemoryKind::OptimizerState), 8 << 20);
  MemorySettings sgd = fp32;
  sgd.optimizer = models::OptimizerKind::Sgd;
  BOOST_CHECK_EQUAL(kind(weight_memory(layers, sgd), MemoryKind::OptimizerState), 4 << 20);
  MemorySettings sharded = fp32;
  sharded.replicas = 4;
  sharded.optimizer_state = dp::OptimizerState::Sharded;
  const auto c = weight_memory(layers, sharded);
  BOOST_CHECK_EQUAL(kind(c, MemoryKind::OptimizerState), 2 << 20);
  BOOST_CHECK_EQUAL(kind(c, MemoryKind::Gradients), 4 << 20);         // in the flat buckets
  BOOST_CHECK_EQUAL(kind(c, MemoryKind::Communication), 0);
  BOOST_CHECK_EQUAL(kind(c, MemoryKind::Parameters), 4 << 20);
  // bf16, sharded: 2 of 16-bit weights, 4 of gradient, (4 + 8) / R of masters and state.
  MemorySettings sharded_bf16 = sharded;
  sharded_bf16.precision = models::Precision::Bf16;
  const auto d = weight_memory(layers, sharded_bf16);
  BOOST_CHECK_EQUAL(kind(d, MemoryKind::Parameters), 2 << 20);
  BOOST_CHECK_EQUAL(kind(d, MemoryKind::Gradients), 4 << 20);
  BOOST_CHECK_EQUAL(kind(d, MemoryKind::MasterWeights), 1 << 20);
  BOOST_CHECK_EQUAL(kind(d, MemoryKind::OptimizerState), 2 << 20);
  MemorySettings replicated = sharded;
  replicated.optimizer_state = dp::OptimizerState::Replicated;
  BOOST_CHECK_EQUAL(kind(weight_memory(layers, replicated), MemoryKind::OptimizerState), 8 << 20);
  // Offloaded, the state and the fp32 masters are host memory: bf16 leaves 2 of 16-bit weights and
  // 4 of gradient on the device, sharded or not; fp32 keeps its 4 of weights.
  for (const auto& base : {bf16, sharded_bf16}) {
    MemorySettings offloaded = base;
    offloaded.offload = models::OptimizerOffload::Host;
    const auto e = weight_memory(layers, offloaded);
    BOOST_CHECK_EQUAL(kind(e, MemoryKind::Parameters), 2 << 20);
    BOOST_CHECK_EQUAL(kind(e, MemoryKind::Gradients), 4 << 20);
    BOOST_CHECK_EQUAL(kind(e, MemoryKind::MasterWeights), 0);
    BOOST_CHECK_EQUAL(kind(e, MemoryKind::OptimizerState), 0);
  }
  MemorySettings offloaded_fp32 = fp32;
  offloaded_fp32.offload = models::OptimizerOffload::Host;
  BOOST_CHECK_EQUAL(kind(weight_memory(layers, offloaded_fp32), MemoryKind::Parameters), 4 << 20);
  BOOST_CHECK_EQUAL(kind(weight_memory(layers, offloaded_fp32), MemoryKind::MasterWeights), 0);
}

// A stage that updates before the step's verdict keeps a copy of what the update changes: every
// weight and the optimizer state (1/R of it sharded, none on the device offloaded), and under fp16
// loss scaling the gradients it scales.
BOOST_AUTO_TEST_CASE(an_update_before_the_verdict_keeps_a_copy_of_what_it_changes) {
  partition::LayerProfile layer;
  layer.parameter_tensor_bytes = {4 << 20};
  layer.copied_tensor_bytes = {4 << 20};
  const std::vector<const partition::LayerProfile*> layers{&layer};
  MemorySettings before;
  BOOST_CHECK_EQUAL(update_undo_bytes(layers, before), 0);
  MemorySettings after;
  after.update_validation = pipeline::UpdateValidation::After;
  BOOST_CHECK_EQUAL(update_undo_bytes(layers, after), (4 + 8) << 20);   // Adam: weight, two state tensors
  MemorySettings fp16 = after;
  fp16.precision = models::Precision::Fp16;
  BOOST_CHECK_EQUAL(update_undo_bytes(layers, fp16), (4 + 8 + 4) << 20);   // the fp32 master, state, gradient
  MemorySettings sharded_bf16 = after;
  sharded_bf16.precision = models::Precision::Bf16;
  sharded_bf16.replicas = 4;
  sharded_bf16.optimizer_state = dp::OptimizerState::Sharded;
  BOOST_CHECK_EQUAL(update_undo_bytes(layers, sharded_bf16), (2 + 2 + 1) << 20);   // 16-bit value, 1/4 of state and master
  MemorySettings offloaded = after;
  offloaded.precision = models::Precision::Bf16;
  offloaded.offload = models::OptimizerOffload::Host;
  BOOST_CHECK_EQUAL(update_undo_bytes(layers, offloaded), 2 << 20);   // the 16-bit value; the rest is host memory
}

// Ranks sharing the host's cores: 4 one-thread stages on 4 cores (or with cores unknown, or each
// rank taking its share) are predicted as alone; on 2 cores, or 1, ops that run at once slow
// each other down, and so do the replicas' gradient collectives and steps at the end.
BOOST_AUTO_TEST_CASE(ranks_that_share_the_hosts_cores_are_predicted_slower) {
  const auto measured = profile_on(kernels::Device::cpu(0), 1, 0, LinkSpeeds{});
  const auto predicted = [&](int stages, int replicas, int threads, int cores) {
    LinkSpeeds links;
    links.host_cores = cores;
    return fixed_time_step(measured, stages, replicas, threads, links);
  };
  const double alone = predicted(4, 1, 1, 0);
  BOOST_TEST(predicted(4, 1, 1, 4) == alone);
  BOOST_TEST(predicted(4, 1, 0, 1) == alone);   // threads: the machine's share
  const double two = predicted(4, 1, 1, 2), one = predicted(4, 1, 1, 1);
  BOOST_TEST(two > alone);
  BOOST_TEST(one > two);
  BOOST_TEST(one <= 4 * alone + 1e-12);
  BOOST_TEST(predicted(4, 1, 2, 4) == two);   // two threads a rank on 4 cores share them as one on 2
  // One stage twice: on 2 cores as alone, on 1 every op (the all-reduce and step too) at half speed.
  BOOST_TEST(predicted(1, 2, 1, 2) == predicted(1, 2, 1, 0));
  BOOST_TEST(predicted(1, 2, 1, 1) == 2 * predicted(1, 2, 1, 0), boost::test_tools::tolerance(1e-9));
}

// The optimizer step the profile measured is the stage's: the sum over its layers, a 1/R share of
// it for a replica of sharded state; without a measurement (or offloaded) it follows from the
// stated memory bandwidth.
BOOST_AUTO_TEST_CASE(the_profiled_optimizer_step_is_the_stages_and_sharding_divides_it) {
  const auto measured = profile_on(kernels::Device::cpu(0), 1, 0, LinkSpeeds{});
  const auto stage_step = [&](int replicas, dp::OptimizerState state, double per_layer, models::OptimizerOffload offload) {
    test::JobShape shape;
    shape.stages = 2;
    shape.micro_batches = 2;
    shape.replicas = replicas;
    JobConfig job = test::job_of(wide_mlp(), shape, 16 * replicas);
    job.replicas.optimizer_state = state;
    job.optimizer.kind = models::OptimizerKind::Adam;
    job.optimizer.offload = offload;
    const JobPlan plan = plan_job(job);
    auto layers = measured(plan, micro_batch_size_of(plan));
    for (auto& l : layers) l.optimizer_seconds = l.parameters > 0 ? per_layer : 0.0;
    const auto split = partition::partition_uniform(plan.model.layer_count(), 2);
    const auto p = predict_layout(plan, layers, split, LinkSpeeds{});
    int with_params = 0;
    for (int i = split[0].begin; i < split[0].end; ++i) with_params += layers[static_cast<std::size_t>(i)].parameters > 0;
    return std::pair{p.stages[0].optimizer_seconds, with_params};
  };
  const auto none = models::OptimizerOffload::None;
  const auto [alone, layers] = stage_step(1, dp::OptimizerState::Replicated, 1e-3, none);
  BOOST_REQUIRE_GT(layers, 0);
  BOOST_TEST(alone == layers * 1e-3, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(stage_step(2, dp::OptimizerState::Replicated, 1e-3, none).first == alone);
  BOOST_TEST(stage_step(2, dp::OptimizerState::Sharded, 1e-3, none).first == alone / 2, boost::test_tools::tolerance(1e-12));
  // Unmeasured or offloaded: the bandwidth formula, the same for any measured figure.
  const double stated = stage_step(1, dp::OptimizerState::Replicated, 0.0, none).first;
  BOOST_TEST(stated > 0.0);
  BOOST_TEST(stated != alone);
  BOOST_TEST(stage_step(1, dp::OptimizerState::Replicated, 1e-3, models::OptimizerOffload::Host).first ==
             stage_step(1, dp::OptimizerState::Replicated, 5e-3, models::OptimizerOffload::Host).first);
}

// The replicas' all-reduce as plan measures it on this host: a latency per ring step, a cost per
// call and a bandwidth, none negative; and each bucket pays its own steps and calls in the
// predicted gradient sync, two calls with sharded state (a reduce-scatter and an all-gather).
BOOST_AUTO_TEST_CASE(the_replicas_all_reduce_is_measured_and_each_bucket_pays_its_latency) {
  const auto measured = measure_cpu_allreduce(3, std::int64_t{1} << 20);
  BOOST_TEST(measured.latency_s > 0.0);
  BOOST_TEST(measured.latency_s < 1.0);
  BOOST_TEST(measured.call_s < 1.0);
  BOOST_TEST(measured.bytes_per_s > 0.0);
  BOOST_TEST(std::isfinite(measured.bytes_per_s));

  const auto profiler = profile_on(kernels::Device::cpu(0), 1, 0, LinkSpeeds{});
  const auto sync = [&](std::int64_t bucket_bytes, double latency, double call, dp::OptimizerState state) {
    test::JobShape shape;
    shape.replicas = 2;
    JobConfig job = test::job_of(wide_mlp(), shape, 32);
    job.replicas.bucket_bytes = bucket_bytes;
    job.replicas.optimizer_state = state;
    const JobPlan plan = plan_job(job);
    LinkSpeeds links;
    links.replica_latency_s = latency;
    links.replica_call_s = call;
    const auto p = predict_layout(plan, profiler(plan, micro_batch_size_of(plan)),
                                  partition::partition_uniform(plan.model.layer_count(), 1), links);
    return p.stages.front().gradient_sync_seconds;
  };
  const auto plain = dp::OptimizerState::Replicated, sharded = dp::OptimizerState::Sharded;
  const std::int64_t big = std::int64_t{1} << 30;
  const double without = sync(big, 0.0, 0.0, plain);
  BOOST_TEST(without > 0.0);
  BOOST_TEST(sync(big, 0.0, 0.0, sharded) == without, boost::test_tools::tolerance(1e-9));   // the same bytes
  // One bucket: 2 (R - 1) = 2 steps and one call (two sharded); buckets of 64 KiB: as many each.
  BOOST_TEST(sync(big, 1e-3, 0.0, plain) == without + 2e-3, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(sync(big, 1e-3, 0.0, sharded) == without + 2e-3, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(sync(big, 0.0, 1e-3, plain) == without + 1e-3, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(sync(big, 0.0, 1e-3, sharded) == without + 2e-3, boost::test_tools::tolerance(1e-9));
  const std::int64_t params = (144 * 256 + 256 + 2 * (256 * 256 + 256) + 256 * 10 + 10) * 4;   // wide_mlp, F32
  const auto buckets = static_cast<double>((params + (64 << 10) - 1) / (64 << 10));
  BOOST_TEST(sync(64 << 10, 1e-3, 0.0, plain) == without + buckets * 2e-3, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(sync(64 << 10, 1e-3, 1e-3, sharded) == without + buckets * 4e-3, boost::test_tools::tolerance(1e-9));
}

// Running statistics follow replica 0 every step: a stage holding any pays one more collective
// (a step's latency and their bytes; no call, it follows another collective) when it has
// replicas, nothing with one.
BOOST_AUTO_TEST_CASE(a_replicated_stage_with_running_statistics_pays_their_broadcast) {
  const auto profiler = profile_on(kernels::Device::cpu(0), 1, 0, LinkSpeeds{});
  const auto sync = [&](int replicas, std::int64_t buffer_bytes) {
    test::JobShape shape;
    shape.replicas = replicas;
    JobConfig job = test::job_of(wide_mlp(), shape, 32);
    const JobPlan plan = plan_job(job);
    auto layers = profiler(plan, micro_batch_size_of(plan));
    layers.front().buffer_bytes = buffer_bytes;
    LinkSpeeds links;
    links.replica_latency_s = 1e-3;
    links.replica_call_s = 2e-3;
    links.replica_bytes_per_s = 1e9;
    return predict_layout(plan, layers, partition::partition_uniform(plan.model.layer_count(), 1), links)
        .stages.front()
        .gradient_sync_seconds;
  };
  BOOST_TEST(sync(2, 1000000) == sync(2, 0) + 1e-3 + 1e-3, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(sync(1, 1000000) == 0.0);
}

// A message between stages waits for a core when the ranks' threads outnumber the host's: the
// measured hand-off is added to every send then, and to none when each rank has a core.
BOOST_AUTO_TEST_CASE(messages_wait_for_a_core_only_when_the_ranks_outnumber_the_cores) {
  const double handoff = measure_stage_handoff(2, 20);
  BOOST_TEST(handoff > 0.0);
  BOOST_TEST(handoff < 1.0);
  BOOST_TEST(measure_stage_handoff(0, 5) > 0.0);

  const auto measured = profile_on(kernels::Device::cpu(0), 1, 0, LinkSpeeds{});
  const auto predicted = [&](int cores, double busy_handoff) {
    LinkSpeeds links;
    links.host_cores = cores;
    links.busy_handoff_s = busy_handoff;
    return fixed_time_step(measured, 4, 1, 1, links);
  };
  BOOST_TEST(predicted(4, 1e-3) == predicted(4, 0.0));
  BOOST_TEST(predicted(2, 1e-3) > predicted(2, 0.0) + 1e-3);   // at least the first forward's message
}

// Layers measured 1.5x slower beside co-runners: each stage's slowdown is 0.5, and the step is
// longer than without, by at most that (the ops; the collectives and steps after the pipeline are
// not slowed); on a host whose cores are not shared, or with one rank alone, nothing changes.
BOOST_AUTO_TEST_CASE(layers_slower_beside_the_other_ranks_slow_the_predicted_step) {
  const auto measured = profile_on(kernels::Device::cpu(0), 1, 0, LinkSpeeds{});
  LinkSpeeds shared;
  shared.host_cores = 4;
  const auto plain = fixed_time_prediction(measured, 4, 1, 1, shared);
  const auto slowed = fixed_time_prediction(measured, 4, 1, 1, shared, 1.5);
  for (const auto& st : plain.stages) BOOST_TEST(st.co_run_slowdown == 0.0);
  for (const auto& st : slowed.stages) BOOST_TEST(st.co_run_slowdown == 0.5, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(slowed.step_seconds > plain.step_seconds);
  BOOST_TEST(slowed.step_seconds <= 1.5 * plain.step_seconds + 1e-12);
  // Measured beside the others, but predicted for a host whose cores are not shared: as without.
  const auto unshared = fixed_time_prediction(measured, 4, 1, 1, LinkSpeeds{}, 1.5);
  BOOST_TEST(unshared.step_seconds == fixed_time_prediction(measured, 4, 1, 1, LinkSpeeds{}).step_seconds);
  for (const auto& st : unshared.stages) BOOST_TEST(st.co_run_slowdown == 0.0);
  // One rank: nothing computes beside it.
  BOOST_TEST(fixed_time_prediction(measured, 1, 1, 1, shared, 1.5).step_seconds ==
             fixed_time_prediction(measured, 1, 1, 1, shared).step_seconds);
  // Two replicas of one stage always run side by side: every op of the pipeline 1.5x as long.
  const auto two = fixed_time_prediction(measured, 1, 2, 1, shared);
  const auto two_slowed = fixed_time_prediction(measured, 1, 2, 1, shared, 1.5);
  BOOST_TEST(two_slowed.simulation.makespan == 1.5 * two.simulation.makespan, boost::test_tools::tolerance(1e-9));
  BOOST_TEST(two_slowed.step_seconds - two_slowed.simulation.makespan == two.step_seconds - two.simulation.makespan,
             boost::test_tools::tolerance(1e-9));
  // What the profile runs beside a rank: the other ranks that can compute at once, in whole ranks.
  JobConfig job = base_job();
  job.pipeline.stages = 4;
  job.pipeline.micro_batches = 4;
  job.resources.threads = 2;
  const JobPlan plan = plan_job(job);
  LinkSpeeds five;
  five.host_cores = 5;
  BOOST_TEST(core_sharing_of(plan, five).co_run_threads == 4);
  BOOST_TEST(co_runners_of(core_sharing_of(plan, five)) == 1);
  BOOST_TEST(prediction_profile_options(plan, 4, 1, 0, five).co_runners == 1);
  BOOST_TEST(prediction_profile_options(plan, 4, 1, 0, LinkSpeeds{}).co_runners == 0);
}

BOOST_AUTO_TEST_SUITE_END()

}  // namespace pw::train
