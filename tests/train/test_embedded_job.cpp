// Pipelines of engines on a world of threads against single-device training: every schedule gives
// the same losses and weights as one stage with the whole batch; tied weights, memory caps,
// failures; replicas follow one stage with the global batch.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include <unistd.h>
#include <random>

#include <boost/test/unit_test.hpp>

#include "kernels/allocator.h"
#include "kernels/runtime.h"
#include "models/data/dataset.h"
#include "models/layers/linear.h"
#include "models/layers/simple.h"
#include "partition/partitioners.h"
#include "tests/support/test_util.h"
#include "tests/train/job_test_util.h"
#include "train/embedded_job.h"
#include "train/layout_prediction.h"

using namespace pw;
using namespace pw::pipeline;
using kernels::Device;
using pw::test::job_of;
using pw::test::JobShape;
using pw::test::tied_mlp;

namespace {

partition::ModelDescription seed_cnn() {
  models::ModelOptions o;
  o.sample_shape = {1, 12, 12};
  return partition::describe(models::make_model_spec("seed-cnn", o));
}

struct Run {
  std::vector<double> losses;
  std::map<std::string, std::vector<double>> weights;
};

Run train_job(const partition::ModelDescription& model, ScheduleSpec spec, std::vector<int> split,
          const std::string& recompute = "none", int steps = 3, const std::string& schedule_file = "",
          int replicas = 1, int batch = 16) {
  JobShape shape{spec.kind, spec.stages, spec.micro_batches, spec.chunks, split, recompute};
  shape.replicas = replicas;
  auto config = job_of(model, shape, batch);
  config.pipeline.schedule_file = schedule_file;
  train::EmbeddedJob trainer(train::plan_job(config));
  auto data = models::data::make_synthetic_images(256, {1, 12, 12}, 10, 5);
  models::data::DataLoader loader(*data, batch, models::data::Shuffle::Yes, 3, models::data::LastBatch::Drop);
  loader.start_epoch(0);
  Run run;
  for (int i = 0; i < steps; ++i) run.losses.push_back(trainer.step(*loader.next()).loss);
  for (auto& [name, p] : trainer.named_parameters()) run.weights[name] = p->value.to_double_vector();
  return run;
}

void check_same(const Run& got, const Run& want, const std::string& what) {
  BOOST_TEST_CONTEXT(what) {
    BOOST_REQUIRE_EQUAL(got.losses.size(), want.losses.size());
    for (std::size_t i = 0; i < got.losses.size(); ++i)
      BOOST_CHECK_SMALL(std::abs(got.losses[i] - want.losses[i]) / std::abs(want.losses[i]), 1e-5);
    BOOST_REQUIRE_EQUAL(got.weights.size(), want.weights.size());
    for (const auto& [name, w] : want.weights) {
      const auto& g = got.weights.at(name);
      double num = 0, den = 0;
      for (std::size_t i = 0; i < w.size(); ++i) {
        num += (g[i] - w[i]) * (g[i] - w[i]);
        den += w[i] * w[i];
      }
      BOOST_TEST_CONTEXT(name) { BOOST_CHECK_SMALL(std::sqrt(num / den), 1e-5); }
    }
  }
}

ScheduleSpec spec(ScheduleKind kind, int stages, int micro_batches, int chunks = 1) {
  return {kind, stages, micro_batches, chunks};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(embedded_job)

BOOST_AUTO_TEST_CASE(every_schedule_matches_single_device_training) {
  const auto model = seed_cnn();   // conv1 relu1 pool1 flatten fc1 relu2 fc2
  const Run reference = train_job(model, spec(ScheduleKind::GPipe, 1, 1), {});
  check_same(train_job(model, spec(ScheduleKind::GPipe, 2, 4), {3}), reference, "gpipe P=2 M=4");
  check_same(train_job(model, spec(ScheduleKind::OneFOneB, 3, 4), {2, 5}), reference, "1f1b P=3 M=4");
  check_same(train_job(model, spec(ScheduleKind::OneFOneB, 4, 8), {1, 3, 5}), reference, "1f1b P=4 M=8");
  check_same(train_job(model, spec(ScheduleKind::Interleaved, 2, 4, 2), {2, 4, 5}), reference, "interleaved P=2 V=2 M=4");
  check_same(train_job(model, spec(ScheduleKind::ZeroBubbleH1, 2, 4), {4}), reference, "zb-h1 P=2 M=4");
  check_same(train_job(model, spec(ScheduleKind::OneFOneB, 2, 4), {4}, "all"), reference, "1f1b recompute all");
  check_same(train_job(model, spec(ScheduleKind::ZeroBubbleH1, 2, 2), {2}, "except-last"), reference,
             "zb-h1 recompute except-last");
}

// The zero-bubble programs reorder work and split backwards; with recomputation on every piece
// (the Recompute before each Bi rebuilds what its W needs too) and over two replicas, the result
// is still one device's.
BOOST_AUTO_TEST_CASE(zero_bubble_schedules_with_recompute_match_single_device_training) {
  const auto model = seed_cnn();
  // Batch 24: 2 replicas x 3 or 4 micro-batches of equal size.
  const int batch = 24;
  const Run reference = train_job(model, spec(ScheduleKind::GPipe, 1, 1), {}, "none", 3, "", 1, batch);
  for (int replicas : {1, 2}) {
    auto check = [&](ScheduleSpec s, std::vector<int> split, const std::string& what) {
      check_same(train_job(model, s, std::move(split), "all", 3, "", replicas, batch), reference,
                 what + " replicas=" + std::to_string(replicas));
    };
    check(spec(ScheduleKind::ZeroBubbleH2, 2, 4), {4}, "zb-h2 P=2 M=4");
    check(spec(ScheduleKind::ZeroBubbleH2, 3, 4), {2, 5}, "zb-h2 P=3 M=4");
    check(spec(ScheduleKind::InterleavedZeroBubble, 2, 4, 2), {2, 4, 5}, "interleaved-zb P=2 V=2 M=4");
    check(spec(ScheduleKind::InterleavedZeroBubble, 3, 3, 2), {1, 2, 3, 4, 5}, "interleaved-zb P=3 V=2 M=3");
  }
}

BOOST_AUTO_TEST_CASE(tied_weight_gradients_are_summed_over_both_stages) {
  const auto model = tied_mlp();
  const Run together = train_job(model, spec(ScheduleKind::GPipe, 1, 1), {});
  const Run apart = train_job(model, spec(ScheduleKind::OneFOneB, 2, 4), {4});
  check_same(apart, together, "tied weight split over two stages");
  // Both copies stay bit-identical, and the tied weight did move.
  BOOST_CHECK(apart.weights.at("fc_mid.weight") == apart.weights.at("fc_mid2.weight"));
  BOOST_CHECK(together.weights.at("fc_mid.weight") == together.weights.at("fc_mid2.weight"));
}

// V placement from a hand-written program (GPipe's order down and back up the V): pieces 1 and 2,
// which hold the two tied weights, are both on stage 1, so the tie is local to one stage; the loss is
// on stage 0 and the turn from piece 1 to piece 2 stays on stage 1.
BOOST_AUTO_TEST_CASE(a_v_placed_program_with_a_local_tie_matches_single_device_training) {
  const auto model = tied_mlp();   // flatten fc_in relu1 fc_mid relu2 fc_mid2 relu3 fc_out
  const auto file = std::filesystem::temp_directory_path() / ("pw_v_" + std::to_string(::getpid()) + ".sched");
  std::ofstream(file) << "F0.0 sA0.0 F1.0 sA1.0 rA0.1 F0.1 rA1.1 F1.1 B0.1 sG0.1 B1.1 sG1.1 rG0.0 B0.0 rG1.0 B1.0 RG S\n"
                         "rA0.0 F0.0 sA0.0 rA1.0 F1.0 sA1.0 rA0.1 F0.1 sA0.1 rA1.1 F1.1 sA1.1 "
                         "rG0.1 B0.1 sG0.1 rG1.1 B1.1 sG1.1 rG0.0 B0.0 sG0.0 rG1.0 B1.0 sG1.0 RG S\n";
  const Run together = train_job(model, spec(ScheduleKind::GPipe, 1, 1), {});
  const Run v = train_job(model, spec(ScheduleKind::ZeroBubbleV, 2, 2, 2), {2, 4, 6}, "none", 3, file.string());
  std::filesystem::remove(file);
  check_same(v, together, "V placement, tie local to stage 1");
  BOOST_CHECK(v.weights.at("fc_mid.weight") == v.weights.at("fc_mid2.weight"));
}

// The generated V schedules (zb-v, v-half, v-min, dualpipev; dualpipev's overlapped F&B pairs run
// one after the other) train like one device, with replicas and with recomputation.
BOOST_AUTO_TEST_CASE(generated_v_schedules_match_single_device_training) {
  const auto model = seed_cnn();   // conv1 relu1 pool1 flatten fc1 relu2 fc2: room for 3 stages x 2 chunks
  const Run reference = train_job(model, spec(ScheduleKind::GPipe, 1, 1), {});
  for (ScheduleKind kind :
       {ScheduleKind::ZeroBubbleV, ScheduleKind::VHalf, ScheduleKind::VMin, ScheduleKind::DualPipeV}) {
    const std::string name = schedule_kind_name(kind);
    check_same(train_job(model, spec(kind, 2, 4, 2), {2, 4, 5}), reference, name + " P=2 M=4");
    check_same(train_job(model, spec(kind, 3, 8, 2), {1, 2, 4, 5, 6}), reference, name + " P=3 M=8");
    check_same(train_job(model, spec(kind, 2, 4, 2), {2, 4, 5}, "all"), reference, name + " P=2 recompute all");
    check_same(train_job(model, spec(kind, 2, 4, 2), {2, 4, 5}, "none", 3, "", 2), reference,
               name + " P=2 two replicas");
  }
}

// A weight tied between the first piece and the last: V placement puts both on stage 0, so the tie
// is summed on one stage.
BOOST_AUTO_TEST_CASE(v_schedules_with_a_tie_between_the_first_and_last_piece_match_one_device) {
  const auto model = pw::test::tied_ends_mlp();
  const Run together = train_job(model, spec(ScheduleKind::GPipe, 1, 1), {});
  BOOST_CHECK(together.weights.at("fc_first.weight") == together.weights.at("fc_last.weight"));
  for (ScheduleKind kind : {ScheduleKind::ZeroBubbleV, ScheduleKind::DualPipeV}) {
    const Run v = train_job(model, spec(kind, 2, 4, 2), {3, 5, 8});
    check_same(v, together, schedule_kind_name(kind) + " tie between pieces 0 and 3");
    BOOST_CHECK(v.weights.at("fc_first.weight") == v.weights.at("fc_last.weight"));
  }
}

BOOST_AUTO_TEST_CASE(a_model_too_big_for_one_capped_device_trains_over_four) {
  models::ModelOptions mo;
  mo.width = 16;
  mo.sample_shape = {1, 12, 12};
  const auto model = partition::describe(models::make_model_spec("resnet18", mo));
  const auto batch = [] {
    auto data = models::data::make_synthetic_images(64, {1, 12, 12}, 10, 5);
    models::data::DataLoader loader(*data, 16, models::data::Shuffle::No, 0, models::data::LastBatch::Drop);
    loader.start_epoch(0);
    return *loader.next();
  }();
  auto run_on = [&](int stages, int first_device, std::int64_t cap) {
    for (int s = 0; s < stages; ++s) {
      auto& rt = kernels::DeviceRuntime::get(Device::cpu(first_device + s));
      rt.set_memory_cap(cap);
      rt.allocator().release_cache();
      rt.allocator().reset_peak();
    }
    const auto split = partition::partition_by_params(partition::layer_parameter_counts(model), stages);
    JobShape shape{ScheduleKind::OneFOneB, stages, 4};
    for (std::size_t i = 1; i < split.size(); ++i) shape.split.push_back(split[i].begin);
    shape.first_device = first_device;
    auto config = job_of(model, shape, 16);
    config.optimizer.kind = models::OptimizerKind::Adam;
    config.optimizer.lr = 0;
    train::EmbeddedJob trainer(train::plan_job(config));
    trainer.step(batch);
    return trainer.step(batch).stage_peak_memory;
  };
  // Measure the four stages without a cap, then cap every device a little above the largest.
  const auto peaks = run_on(4, 30, 0);
  const auto cap = *std::max_element(peaks.begin(), peaks.end()) * 5 / 4;
  BOOST_CHECK_THROW(run_on(1, 40, cap), kernels::OutOfMemory);
  // On cpu:0..3, as the CLI's defaults: each stage builds its layers on its own device.
  BOOST_CHECK_NO_THROW(run_on(4, 0, cap));
  for (int d : {0, 1, 2, 3, 40}) kernels::DeviceRuntime::get(Device::cpu(d)).set_memory_cap(0);
}

namespace {
// Three steps of the seed CNN on 3 stages (split at `split`, 4 micro-batches, batch 64) with its
// config adjusted by `configure`, ranks on cpu:first_device..+2: losses, final weights, each
// stage's measured peak, and the plan's prediction from `profiles` (profiled once on first use and
// shared: layer times measured twice differ on a loaded machine).
struct RecomputeRun {
  std::vector<double> losses;
  std::map<std::string, std::vector<double>> weights;
  std::vector<std::int64_t> peaks;
  train::LayoutPrediction predicted;
};
RecomputeRun three_stage_run(ScheduleKind kind, const std::vector<int>& split, int first_device,
                             std::vector<partition::LayerProfile>& profiles,
                             const std::function<void(train::JobConfig&)>& configure) {
  const auto model = seed_cnn();
  auto data = models::data::make_synthetic_images(256, {1, 12, 12}, 10, 5);
  JobShape shape{kind, 3, 4, 1, split};
  shape.first_device = first_device;
  auto config = job_of(model, shape, 64);
  configure(config);
  for (int s = 0; s < 3; ++s) {
    auto& rt = kernels::DeviceRuntime::get(Device::cpu(first_device + s));
    rt.allocator().release_cache();
    rt.allocator().reset_peak();
  }
  const auto plan = train::plan_job(config);
  if (profiles.empty()) profiles = partition::profile_layers(plan.model, Device::cpu(first_device + 3), 16, 1);
  RecomputeRun m;
  m.predicted = train::predict_layout(plan, profiles, partition::split_at(plan.model.layer_count(), split),
                                      train::LinkSpeeds{});
  train::EmbeddedJob trainer(plan);
  models::data::DataLoader loader(*data, 64, models::data::Shuffle::Yes, 3, models::data::LastBatch::Drop);
  loader.start_epoch(0);
  for (int i = 0; i < 3; ++i) {
    const auto outcome = trainer.step(*loader.next());
    m.losses.push_back(outcome.loss);
    m.peaks = outcome.stage_peak_memory;
  }
  for (auto& [name, p] : trainer.named_parameters()) m.weights[name] = p->value.to_double_vector();
  return m;
}
}  // namespace

// AdaPipe's choice per stage: recomputing only stage 0 of three re-runs its forwards and changes no
// bit of the losses or weights; it lowers stage 0's measured and predicted peak and leaves the
// prediction of the other stages as it was.
BOOST_AUTO_TEST_CASE(recompute_chosen_per_stage_trains_bitwise_as_none_and_lowers_only_that_stages_peak) {
  std::vector<partition::LayerProfile> profiles;
  const auto run = [&](const std::vector<partition::Recompute>& per_stage, int first_device) {
    return three_stage_run(ScheduleKind::OneFOneB, {2, 5}, first_device, profiles,
                           [&](train::JobConfig& c) { c.pipeline.recompute_stages = per_stage; });
  };
  using partition::Recompute;
  const RecomputeRun none = run({}, 60);
  const RecomputeRun mixed = run({Recompute::All, Recompute::None, Recompute::None}, 64);
  BOOST_CHECK(mixed.losses == none.losses);
  BOOST_CHECK(mixed.weights == none.weights);
  BOOST_REQUIRE_EQUAL(mixed.peaks.size(), 3u);
  BOOST_CHECK_LT(mixed.peaks[0], none.peaks[0]);
  BOOST_CHECK(mixed.predicted.pieces[0].recomputes && !mixed.predicted.pieces[1].recomputes);
  BOOST_CHECK_LT(mixed.predicted.stages[0].peak_bytes, none.predicted.stages[0].peak_bytes);
  BOOST_CHECK_EQUAL(mixed.predicted.stages[1].peak_bytes, none.predicted.stages[1].peak_bytes);
  BOOST_CHECK_EQUAL(mixed.predicted.stages[2].peak_bytes, none.predicted.stages[2].peak_bytes);
  // Recomputation costs stage 0 its forwards again, in the prediction.
  BOOST_CHECK_GT(mixed.predicted.stages[0].pipeline_seconds, none.predicted.stages[0].pipeline_seconds);
}

// Selective recomputation: chosen layers (conv1, relu1 on stage 0; relu2 on stage 2) keep no
// activations and re-run their forwards inside the backward, under 1F1B and under ZB-H1's split
// backward. No bit of the losses or weights changes; the stages with chosen layers peak lower,
// measured and predicted, and the prediction charges them the re-run forwards.
BOOST_AUTO_TEST_CASE(recomputed_layers_train_bitwise_as_none_and_lower_their_stages_peak) {
  std::vector<partition::LayerProfile> profiles;   // conv1 relu1 pool1 | flatten fc1 | relu2 fc2
  const auto run = [&](ScheduleKind kind, const std::vector<std::string>& layers, int first_device) {
    return three_stage_run(kind, {3, 5}, first_device, profiles,
                           [&](train::JobConfig& c) { c.pipeline.recompute_layers = layers; });
  };
  for (const auto kind : {ScheduleKind::OneFOneB, ScheduleKind::ZeroBubbleH1}) {
    BOOST_TEST_CONTEXT(pipeline::schedule_kind_name(kind)) {
      const RecomputeRun none = run(kind, {}, 60);
      const RecomputeRun chosen = run(kind, {"conv1", "relu1", "relu2"}, 64);
      BOOST_CHECK(chosen.losses == none.losses);
      BOOST_CHECK(chosen.weights == none.weights);
      BOOST_REQUIRE_EQUAL(chosen.peaks.size(), 3u);
      BOOST_CHECK_LT(chosen.peaks[0], none.peaks[0]);
      BOOST_CHECK_LT(chosen.predicted.stages[0].peak_bytes, none.predicted.stages[0].peak_bytes);
      BOOST_CHECK_EQUAL(chosen.predicted.stages[1].peak_bytes, none.predicted.stages[1].peak_bytes);
      BOOST_CHECK_GT(chosen.predicted.pieces[0].rebuild_seconds, 0.0);
      BOOST_CHECK_EQUAL(chosen.predicted.pieces[1].rebuild_seconds, 0.0);
      BOOST_CHECK_GT(chosen.predicted.stages[0].pipeline_seconds, none.predicted.stages[0].pipeline_seconds);
    }
  }
}

BOOST_AUTO_TEST_CASE(one_failing_stage_stops_the_others_at_once) {
  // A batch whose labels are out of range fails on the last stage; the first stage, blocked on
  // a gradient, must not wait out its 30 s deadline.
  const auto model = seed_cnn();
  auto config = job_of(model, JobShape{ScheduleKind::OneFOneB, 2, 2, 1, {3}}, 4);
  config.timeouts.stage_seconds = 30;
  train::EmbeddedJob trainer(train::plan_job(config));
  models::data::Batch bad{kernels::Tensor::zeros({4, 1, 12, 12}),
                          kernels::Tensor::from_vector(std::vector<std::int64_t>{0, 1, 2, 99}, {4})};
  const auto start = std::chrono::steady_clock::now();
  try {
    trainer.step(bad);
    BOOST_FAIL("expected an error");
  } catch (const Error& e) {
    const std::string msg = e.what();
    BOOST_CHECK_MESSAGE(msg.find("stage 1") != std::string::npos && msg.find("99") != std::string::npos, msg);
  }
  BOOST_CHECK_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  // The failure does not poison the next step.
  models::data::Batch good{kernels::Tensor::zeros({4, 1, 12, 12}),
                           kernels::Tensor::from_vector(std::vector<std::int64_t>{0, 1, 2, 3}, {4})};
  BOOST_CHECK_NO_THROW(trainer.step(good));
}

BOOST_AUTO_TEST_CASE(tied_weights_listed_twice_are_rejected) {
  auto model = tied_mlp();
  model.tied = {{"mid", {"fc_mid.weight", "fc_mid.weight"}}};
  BOOST_CHECK_THROW(partition::check_tied(model), InputError);
  model.tied = {{"a", {"fc_mid.weight", "fc_mid2.weight"}}, {"b", {"fc_mid2.weight", "fc_in.weight"}}};
  BOOST_CHECK_THROW(partition::check_tied(model), InputError);
}

BOOST_AUTO_TEST_CASE(batch_must_split_into_equal_micro_batches) {
  const auto model = seed_cnn();
  train::EmbeddedJob trainer(train::plan_job(job_of(model, JobShape{ScheduleKind::GPipe, 2, 3, 1, {3}}, 12)));
  models::data::Batch batch{kernels::Tensor::zeros({8, 1, 12, 12}), kernels::Tensor::zeros({8}, kernels::DType::I64)};
  BOOST_CHECK_THROW(trainer.step(batch), InputError);
}

namespace {

models::data::Batch random_batch(std::int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> pixel(0.0f, 1.0f);
  std::uniform_int_distribution<std::int64_t> label(0, 9);
  std::vector<float> x(static_cast<std::size_t>(n * 28 * 28));
  for (auto& v : x) v = pixel(rng);
  std::vector<std::int64_t> y(static_cast<std::size_t>(n));
  for (auto& v : y) v = label(rng);
  return {kernels::Tensor::from_vector(x, {n, 1, 28, 28}), kernels::Tensor::from_vector(y, {n})};
}

std::vector<float> weights(train::EmbeddedJob& job, int replica) {
  std::vector<float> all;
  for (auto& [name, p] : job.named_parameters(replica)) {
    const auto v = p->value.to_float_vector();
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

train::JobConfig hybrid_job(const partition::ModelDescription& model, int stages, int micro_batches, int replicas,
                            int first_device) {
  JobShape shape{ScheduleKind::OneFOneB, stages, micro_batches, 1, stages > 1 ? std::vector<int>{4} : std::vector<int>{}};
  shape.replicas = replicas;
  shape.first_device = first_device;
  auto c = job_of(model, shape, 32);
  c.optimizer.momentum = 0.9;
  return c;
}

}  // namespace

BOOST_AUTO_TEST_CASE(two_replicas_of_two_stages_follow_one_stage_with_the_global_batch) {
  models::ModelOptions mo;
  const auto model = partition::describe(models::make_model_spec("seed-cnn", mo));
  // Micro-batch 2m + r of the single pipeline holds the rows of replica r's micro-batch m.
  for (std::int64_t bucket : {std::int64_t{1} << 10, std::int64_t{25} << 20}) {
    BOOST_TEST_CONTEXT("bucket " << bucket << " bytes") {
      train::EmbeddedJob reference(train::plan_job(hybrid_job(model, 1, 4, 1, 0)));
      auto config = hybrid_job(model, 2, 2, 2, 1);
      config.replicas.bucket_bytes = bucket;
      train::EmbeddedJob hybrid(train::plan_job(config));
      train::StepOutcome b;
      for (unsigned step = 0; step < 4; ++step) {
        const auto batch = random_batch(32, 100 + step);
        const auto a = reference.step(batch);
        b = hybrid.step(batch);
        BOOST_TEST(b.samples == 32);
        BOOST_TEST(std::abs(a.loss - b.loss) / a.loss <= 1e-5, "step " << step << ": " << a.loss << " vs " << b.loss);
        BOOST_TEST(a.correct == b.correct);
      }
      const auto ref = weights(reference, 0);
      const auto w0 = weights(hybrid, 0);
      const auto w1 = weights(hybrid, 1);
      BOOST_TEST(w0 == w1);   // replicas stay bit-identical
      BOOST_REQUIRE_EQUAL(ref.size(), w0.size());
      double worst = 0.0;
      for (std::size_t i = 0; i < ref.size(); ++i)
        worst = std::max(worst, std::abs(static_cast<double>(ref[i]) - w0[i]) / (std::abs(ref[i]) + 1e-3));
      BOOST_TEST(worst <= 1e-4, "largest relative weight difference " << worst);
      BOOST_TEST(b.gradient_buckets.size() == 2u);
      if (bucket == (std::int64_t{1} << 10)) BOOST_TEST(b.gradient_buckets[1] > 1);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_global_batch_that_does_not_split_is_refused) {
  models::ModelOptions mo;
  const auto model = partition::describe(models::make_model_spec("seed-cnn", mo));
  train::EmbeddedJob hybrid(train::plan_job(hybrid_job(model, 2, 2, 2, 0)));
  BOOST_CHECK_THROW(hybrid.step(random_batch(6, 1)), InputError);   // 3 per micro-batch, 2 replicas
}

// Batch-norm statistics follow replica 0 after every step: evaluation and saving then agree
// whichever replica does them.
BOOST_AUTO_TEST_CASE(replicas_keep_batch_norm_statistics_equal) {
  models::ModelOptions mo;
  mo.width = 8;
  const auto model = partition::describe(models::make_model_spec("resnet18", mo));
  JobShape shape{ScheduleKind::OneFOneB, 2, 2, 1, {}};
  shape.replicas = 2;
  train::EmbeddedJob job(train::plan_job(job_of(model, shape, 16)));
  for (unsigned step = 0; step < 3; ++step) job.step(random_batch(16, 7 + step));
  bool any = false;
  for (int s = 0; s < 2; ++s) {
    auto a = job.engine(s).layers();
    auto b = job.engine(2 + s).layers();
    for (std::size_t c = 0; c < a.size(); ++c) {
      const auto x = a[c]->named_buffers();
      const auto y = b[c]->named_buffers();
      BOOST_REQUIRE_EQUAL(x.size(), y.size());
      for (std::size_t i = 0; i < x.size(); ++i) {
        BOOST_TEST_CONTEXT(x[i].first) { BOOST_TEST(x[i].second->value.to_double_vector() == y[i].second->value.to_double_vector()); }
        any = true;
      }
    }
  }
  BOOST_TEST(any, "resnet18 has running statistics");
}

// --sync-batch-norm: replica r's part of each micro-batch is the r-th slice of the global one, so
// statistics over the replicas are those of the one-replica job's micro-batch.
BOOST_AUTO_TEST_CASE(synchronised_batch_norm_makes_two_replicas_equal_one) {
  models::ModelOptions mo;
  mo.width = 8;
  const auto model = partition::describe(models::make_model_spec("resnet18", mo));
  auto run = [&](int replicas, int first_device) {
    JobShape shape{ScheduleKind::OneFOneB, 2, 2, 1, {}};
    shape.replicas = replicas;
    shape.first_device = first_device;
    auto config = job_of(model, shape, 16);
    config.replicas.sync_batch_norm = true;
    train::EmbeddedJob job(train::plan_job(config));
    std::vector<double> losses;
    for (unsigned step = 0; step < 3; ++step) losses.push_back(job.step(random_batch(16, 21 + step)).loss);
    std::vector<double> weights;
    for (auto& [name, p] : job.named_parameters(0)) {
      const auto v = p->value.to_double_vector();
      weights.insert(weights.end(), v.begin(), v.end());
    }
    return std::make_pair(losses, weights);
  };
  const auto one = run(1, 0);
  const auto two = run(2, 2);
  for (std::size_t i = 0; i < one.first.size(); ++i)
    BOOST_TEST(std::abs(one.first[i] - two.first[i]) / one.first[i] <= 1e-5, "step " << i << ": " << one.first[i]
                                                                                 << " vs " << two.first[i]);
  double worst = 0.0;
  for (std::size_t i = 0; i < one.second.size(); ++i)
    worst = std::max(worst, std::abs(one.second[i] - two.second[i]) / (std::abs(one.second[i]) + 1e-3));
  BOOST_TEST(worst <= 1e-4, "largest relative weight difference " << worst);
}

BOOST_AUTO_TEST_CASE(under_a_launcher_it_refuses_rather_than_run_a_whole_job_per_process) {
  // The variables torchrun or pipewright launch give rank 1 of 2; restored afterwards.
  struct Env {
    std::vector<std::string> names;
    void set(const std::string& name, const std::string& value) {
      setenv(name.c_str(), value.c_str(), 1);
      names.push_back(name);
    }
    ~Env() {
      for (const auto& n : names) unsetenv(n.c_str());
    }
  } env;
  for (const char* name : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PW_JOB_TOKEN"})
    BOOST_REQUIRE_MESSAGE(std::getenv(name) == nullptr, name << " is set in the test's environment");
  env.set("RANK", "1");
  env.set("WORLD_SIZE", "2");
  env.set("MASTER_ADDR", "127.0.0.1");
  env.set("MASTER_PORT", "29500");
  env.set("PW_JOB_TOKEN", "0123456789abcdef");
  JobShape shape;
  try {
    train::EmbeddedJob job(train::plan_job(job_of(tied_mlp(), shape, 16)));
    BOOST_FAIL("expected an error");
  } catch (const InputError& e) {
    BOOST_TEST(std::string(e.what()).find("this process is rank 1 of 2 started by torchrun-style; run it without a "
                                          "launcher, or train with run_job") != std::string::npos,
               e.what());
  }
}

BOOST_AUTO_TEST_SUITE_END()
