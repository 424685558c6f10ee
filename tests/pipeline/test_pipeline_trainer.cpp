// The pipeline engine against single-device training: every schedule gives the same losses and
// weights as one stage with the whole batch; tied weights, memory caps and deadlines.
#include <boost/test/unit_test.hpp>

#include "kernels/allocator.h"
#include "kernels/runtime.h"
#include "models/data/dataset.h"
#include "models/layers/linear.h"
#include "models/layers/simple.h"
#include "partition/partitioners.h"
#include "pipeline/pipeline_trainer.h"
#include "rpc/in_process_transport.h"
#include "tests/support/test_util.h"

using namespace pw;
using namespace pw::pipeline;
using kernels::Device;

namespace {

partition::ModelDescription seed_cnn() {
  models::ModelOptions o;
  o.sample_shape = {1, 12, 12};
  return partition::describe(models::make_model_spec("seed-cnn", o));
}

// An MLP whose two middle layers share one weight.
partition::ModelDescription tied_mlp() {
  partition::ModelDescription m;
  m.name = "tied-mlp";
  m.sample_shape = {1, 12, 12};
  m.num_classes = 10;
  auto linear = [](int in, int out) { return [=] { return std::unique_ptr<models::Layer>(std::make_unique<models::Linear>(in, out)); }; };
  auto relu = [] { return std::unique_ptr<models::Layer>(std::make_unique<models::ReLU>()); };
  m.layers = {{"flatten", [] { return std::unique_ptr<models::Layer>(std::make_unique<models::Flatten>()); }},
              {"fc_in", linear(144, 32)}, {"relu1", relu},
              {"fc_mid", linear(32, 32)}, {"relu2", relu},
              {"fc_mid2", linear(32, 32)}, {"relu3", relu},
              {"fc_out", linear(32, 10)}};
  m.tied = {{"mid", {"fc_mid.weight", "fc_mid2.weight"}}};
  return m;
}

struct Run {
  std::vector<double> losses;
  std::map<std::string, std::vector<double>> weights;
};

Run train(const partition::ModelDescription& model, ScheduleSpec spec, std::vector<int> split,
          RecomputeMode recompute = RecomputeMode::None, int steps = 3) {
  PipelineOptions o;
  o.spec = spec;
  for (int s = 0; s < spec.stages; ++s) o.devices.push_back(Device::cpu(s));
  o.recompute = recompute;
  o.optimizer.kind = models::OptimizerKind::Sgd;
  o.optimizer.lr = 0.05;
  o.seed = 11;
  o.timeout = std::chrono::seconds(20);
  const auto partition = partition::split_at(model.layer_count(), split);
  PipelineTrainer trainer(model, partition, o);
  auto data = models::data::make_synthetic_images(256, {1, 12, 12}, 10, 5);
  models::data::DataLoader loader(*data, 16, models::data::Shuffle::Yes, 3, models::data::LastBatch::Drop);
  loader.start_epoch(0);
  Run run;
  for (int i = 0; i < steps; ++i) run.losses.push_back(trainer.train_step(*loader.next()).loss);
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

BOOST_AUTO_TEST_SUITE(pipeline_trainer)

BOOST_AUTO_TEST_CASE(every_schedule_matches_single_device_training) {
  const auto model = seed_cnn();   // conv1 relu1 pool1 flatten fc1 relu2 fc2
  const Run reference = train(model, spec(ScheduleKind::GPipe, 1, 1), {});
  check_same(train(model, spec(ScheduleKind::GPipe, 2, 4), {3}), reference, "gpipe P=2 M=4");
  check_same(train(model, spec(ScheduleKind::OneFOneB, 3, 4), {2, 5}), reference, "1f1b P=3 M=4");
  check_same(train(model, spec(ScheduleKind::OneFOneB, 4, 8), {1, 3, 5}), reference, "1f1b P=4 M=8");
  check_same(train(model, spec(ScheduleKind::Interleaved, 2, 4, 2), {2, 4, 5}), reference, "interleaved P=2 V=2 M=4");
  check_same(train(model, spec(ScheduleKind::ZeroBubbleH1, 2, 4), {4}), reference, "zb-h1 P=2 M=4");
  check_same(train(model, spec(ScheduleKind::OneFOneB, 2, 4), {4}, RecomputeMode::All), reference, "1f1b recompute all");
  check_same(train(model, spec(ScheduleKind::ZeroBubbleH1, 2, 2), {2}, RecomputeMode::ExceptLast), reference,
             "zb-h1 recompute except-last");
}

BOOST_AUTO_TEST_CASE(tied_weight_gradients_are_summed_over_both_stages) {
  const auto model = tied_mlp();
  const Run together = train(model, spec(ScheduleKind::GPipe, 1, 1), {});
  const Run apart = train(model, spec(ScheduleKind::OneFOneB, 2, 4), {4});
  check_same(apart, together, "tied weight split over two stages");
  // Both copies stay bit-identical, and the tied weight did move.
  BOOST_CHECK(apart.weights.at("fc_mid.weight") == apart.weights.at("fc_mid2.weight"));
  BOOST_CHECK(together.weights.at("fc_mid.weight") == together.weights.at("fc_mid2.weight"));
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
    PipelineOptions o;
    o.spec = spec(ScheduleKind::OneFOneB, stages, 4);
    for (int s = 0; s < stages; ++s) {
      o.devices.push_back(Device::cpu(first_device + s));
      auto& rt = kernels::DeviceRuntime::get(o.devices.back());
      rt.set_memory_cap(cap);
      rt.allocator().release_cache();
      rt.allocator().reset_peak();
    }
    o.optimizer.kind = models::OptimizerKind::Adam;
    const auto split = partition::partition_by_params(partition::layer_parameter_counts(model), stages);
    PipelineTrainer trainer(model, split, o);
    trainer.train_step(batch);
    trainer.train_step(batch);
    return trainer.stage_peak_memory();
  };
  // Measure the four stages without a cap, then cap every device a little above the largest.
  const auto peaks = run_on(4, 30, 0);
  const auto cap = *std::max_element(peaks.begin(), peaks.end()) * 5 / 4;
  BOOST_CHECK_THROW(run_on(1, 40, cap), kernels::OutOfMemory);
  // On cpu:0..3, as the CLI's defaults: each stage builds its layers on its own device.
  BOOST_CHECK_NO_THROW(run_on(4, 0, cap));
  for (int d : {0, 1, 2, 3, 40}) kernels::DeviceRuntime::get(Device::cpu(d)).set_memory_cap(0);
}

BOOST_AUTO_TEST_CASE(a_stage_waiting_past_its_deadline_names_itself_and_what_it_waited_for) {
  const auto model = seed_cnn();
  const auto partition = partition::split_at(model.layer_count(), {3});
  rpc::InProcessHub hub(2);
  auto transport = hub.endpoint(1);
  StageConfig config;
  config.spec = spec(ScheduleKind::OneFOneB, 2, 2);
  config.stage = 1;
  config.device = Device::cpu(1);
  config.timeout = std::chrono::milliseconds(200);
  std::vector<std::unique_ptr<models::Sequential>> chunks;
  chunks.push_back(partition::build_stage(model, partition[1], 1));
  StageExecutor stage(config, std::move(chunks), {}, *transport);
  MicroBatchInputs inputs;
  for (int i = 0; i < 2; ++i) {
    inputs.images.push_back(kernels::Tensor::zeros({4, 1, 12, 12}));
    inputs.labels.push_back(kernels::Tensor::zeros({4}, kernels::DType::I64));
  }
  try {
    stage.run_step(0, inputs);
    BOOST_FAIL("expected a timeout");
  } catch (const rpc::TimeoutError& e) {
    const std::string msg = e.what();
    BOOST_CHECK_MESSAGE(msg.find("stage 1 (cpu:1)") != std::string::npos, msg);
    BOOST_CHECK_MESSAGE(msg.find("micro-batch 0") != std::string::npos, msg);
    BOOST_CHECK_MESSAGE(msg.find("activation") != std::string::npos, msg);
    BOOST_CHECK_MESSAGE(msg.find("from rank 0") != std::string::npos, msg);
  }
}

BOOST_AUTO_TEST_CASE(one_failing_stage_stops_the_others_at_once) {
  // A batch whose labels are out of range fails on the last stage; the first stage, blocked on
  // a gradient, must not wait out its 30 s deadline.
  const auto model = seed_cnn();
  PipelineOptions o;
  o.spec = spec(ScheduleKind::OneFOneB, 2, 2);
  o.devices = {Device::cpu(0), Device::cpu(1)};
  o.timeout = std::chrono::seconds(30);
  PipelineTrainer trainer(model, partition::split_at(model.layer_count(), {3}), o);
  models::data::Batch bad{kernels::Tensor::zeros({4, 1, 12, 12}),
                          kernels::Tensor::from_vector(std::vector<std::int64_t>{0, 1, 2, 99}, {4})};
  const auto start = std::chrono::steady_clock::now();
  try {
    trainer.train_step(bad);
    BOOST_FAIL("expected an error");
  } catch (const Error& e) {
    const std::string msg = e.what();
    BOOST_CHECK_MESSAGE(msg.find("stage 1") != std::string::npos && msg.find("99") != std::string::npos, msg);
  }
  BOOST_CHECK_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  // The failure does not poison the next step.
  models::data::Batch good{kernels::Tensor::zeros({4, 1, 12, 12}),
                           kernels::Tensor::from_vector(std::vector<std::int64_t>{0, 1, 2, 3}, {4})};
  BOOST_CHECK_NO_THROW(trainer.train_step(good));
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
  PipelineOptions o;
  o.spec = spec(ScheduleKind::GPipe, 2, 3);
  o.devices = {Device::cpu(0), Device::cpu(1)};
  PipelineTrainer trainer(model, partition::split_at(model.layer_count(), {3}), o);
  models::data::Batch batch{kernels::Tensor::zeros({8, 1, 12, 12}), kernels::Tensor::zeros({8}, kernels::DType::I64)};
  BOOST_CHECK_THROW(trainer.train_step(batch), InputError);
}

BOOST_AUTO_TEST_SUITE_END()
