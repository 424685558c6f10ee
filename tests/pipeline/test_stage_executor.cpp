// The stage executor on its own: a stage whose neighbour never sends waits out its deadline and
// names itself, the micro-batch and what it waited for; a stage validating its update after it
// (post-validation) has updated when the verdict is asked for, and ends the step with what a stage
// that waited for the verdict has.
#include <boost/test/unit_test.hpp>

#include <cstring>
#include <random>

#include "models/zoo/model_spec.h"
#include "partition/model_description.h"
#include "pipeline/stage_executor.h"
#include "rpc/in_process_transport.h"

using namespace pw;
using namespace pw::pipeline;
using kernels::Device;

namespace {

partition::ModelDescription seed_cnn() {
  models::ModelOptions o;
  o.sample_shape = {1, 12, 12};
  return partition::describe(models::make_model_spec("seed-cnn", o));
}

ScheduleSpec spec(ScheduleKind kind, int stages, int micro_batches) { return {kind, stages, micro_batches, 1}; }

std::vector<std::vector<double>> values_of(const std::vector<models::Parameter*>& params) {
  std::vector<std::vector<double>> out;
  for (auto* p : params) out.push_back(p->value.to_double_vector());
  return out;
}

// Answers every step with `decision`, noting the parameters' values when the stage reports its
// figures and when it asks for the verdict.
class RecordingCheck : public UpdateCheck {
 public:
  explicit RecordingCheck(UpdateDecision decision) : decision_(decision) {}
  void watch(std::vector<models::Parameter*> params) { params_ = std::move(params); }
  UpdateDecision report(std::int64_t, const GradientShare&, double, double) override {
    at_report = values_of(params_);
    return {};
  }
  UpdateDecision verdict(std::int64_t) override {
    at_verdict = values_of(params_);
    return decision_;
  }
  std::vector<std::vector<double>> at_report, at_verdict;

 private:
  UpdateDecision decision_;
  std::vector<models::Parameter*> params_;
};

struct OneStageRun {
  std::vector<std::vector<double>> weights;   // after the step
  std::vector<std::vector<double>> at_report, at_verdict;
  UpdateValidation validation = UpdateValidation::Auto;   // as the executor resolved it
};

// Two steps of the whole seed CNN on one stage under `kind`, every step answered with `decision`.
OneStageRun one_stage(ScheduleKind kind, UpdateValidation validation, UpdateDecision decision) {
  const auto model = seed_cnn();
  rpc::InProcessHub hub(1);
  auto transport = hub.endpoint(0);
  RecordingCheck check(decision);
  StageConfig config;
  config.spec = spec(kind, 1, 2);
  config.device = Device::cpu(0);
  config.update_check = &check;
  config.update_validation = validation;
  std::vector<std::unique_ptr<models::Sequential>> chunks;
  chunks.push_back(partition::build_stage(model, partition::split_at(model.layer_count(), {})[0], 5));
  models::OptimizerConfig adam;
  adam.kind = models::OptimizerKind::Adam;
  adam.lr = 0.01;
  StageExecutor stage(config, std::move(chunks), adam, *transport);
  check.watch(stage.parameters());
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int step = 0; step < 2; ++step) {
    MicroBatchInputs inputs;
    for (int i = 0; i < 2; ++i) {
      std::vector<float> pixels(4 * 144);
      for (auto& x : pixels) x = normal(rng);
      inputs.images.push_back(kernels::Tensor::from_vector(pixels, {4, 1, 12, 12}));
      inputs.labels.push_back(kernels::Tensor::from_vector(std::vector<std::int64_t>{1, 3, 5, 7}, {4}));
    }
    stage.run_step(step, inputs);
  }
  return {values_of(stage.parameters()), check.at_report, check.at_verdict, stage.config().update_validation};
}

bool same_bits(const std::vector<std::vector<double>>& x, const std::vector<std::vector<double>>& y) {
  if (x.size() != y.size()) return false;
  for (std::size_t i = 0; i < x.size(); ++i)
    if (x[i].size() != y[i].size() || std::memcmp(x[i].data(), y[i].data(), x[i].size() * sizeof(double)) != 0)
      return false;
  return true;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(stage_executor)

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

BOOST_AUTO_TEST_CASE(zero_bubble_schedules_validate_after_the_update_and_the_others_before) {
  for (auto kind : {ScheduleKind::ZeroBubbleH1, ScheduleKind::ZeroBubbleH2, ScheduleKind::ZeroBubbleV,
                    ScheduleKind::VHalf, ScheduleKind::VMin, ScheduleKind::InterleavedZeroBubble,
                    ScheduleKind::DualPipeV})
    BOOST_TEST(post_validates(kind), enum_name(kind));
  for (auto kind : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved})
    BOOST_TEST(!post_validates(kind), enum_name(kind));
  BOOST_TEST((one_stage(ScheduleKind::ZeroBubbleH1, UpdateValidation::Auto, {}).validation == UpdateValidation::After));
  BOOST_TEST((one_stage(ScheduleKind::OneFOneB, UpdateValidation::Auto, {}).validation == UpdateValidation::Before));
  BOOST_TEST((one_stage(ScheduleKind::OneFOneB, UpdateValidation::After, {}).validation == UpdateValidation::After));
}

BOOST_AUTO_TEST_CASE(a_post_validating_stage_updates_before_the_verdict_and_ends_as_a_waiting_stage) {
  const UpdateDecision apply{}, skip{UpdateAction::Skip, 1.0}, clip{UpdateAction::Apply, 0.25};
  for (const auto& [decision, what] : {std::pair{apply, "apply"}, std::pair{skip, "skip"}, std::pair{clip, "clip"}}) {
    BOOST_TEST_CONTEXT(what) {
      const auto waited = one_stage(ScheduleKind::ZeroBubbleH1, UpdateValidation::Before, decision);
      const auto eager = one_stage(ScheduleKind::ZeroBubbleH1, UpdateValidation::After, decision);
      // When the verdict is asked for, the waiting stage has not updated yet and the eager one has.
      BOOST_TEST(same_bits(waited.at_verdict, waited.at_report));
      BOOST_TEST(!same_bits(eager.at_verdict, eager.at_report));
      // Whatever the verdict, the step ends with the same weights, bit for bit.
      BOOST_TEST(same_bits(eager.weights, waited.weights));
      if (decision == skip) BOOST_TEST(same_bits(eager.weights, eager.at_report));
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
