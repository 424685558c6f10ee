// Post-validation (pipeline/update_check.h, train/step_guard.h): with zb-h1 (and every other zero-bubble kind) every stage updates
// before the job's verdict on the step and undoes the update when the verdict is to skip (a
// non-finite gradient on one rank) or to clip. The losses and weights are bitwise those of the same
// job validating before the update (forced with /recovery/update_validation), with 1 and 2
// replicas, in fp32 and fp16, and those of 1f1b, whose gradients are summed in the same order.
// The guard alone: `report` sends without collecting, `verdict` collects and decides.
#include <cmath>
#include <cstring>

#include <boost/test/unit_test.hpp>

#include "models/data/data_loader.h"
#include "models/data/dataset.h"
#include "tests/train/job_test_util.h"
#include "train/embedded_job.h"
#include "train/fault_injection.h"
#include "pipeline/update_check.h"
#include "train/step_guard.h"

using namespace pw;
using pipeline::ScheduleKind;
using pipeline::UpdateValidation;

namespace {

constexpr int kSteps = 4;

struct Run {
  std::vector<double> losses;
  std::vector<bool> skipped;
  std::vector<double> norms;
  std::vector<std::pair<std::string, std::vector<float>>> weights;   // replica 0's, by name
};

struct Scenario {
  const char* name;
  double clip = 0.0;            // /recovery/clip_grad_norm
  std::int64_t nonfinite_step = 0;   // 1-based; 0: none
  int nonfinite_rank = 0;
  models::Precision precision = models::Precision::Fp32;
};

// Injects a NaN into one rank's gradients at one step while alive.
class InjectedNonfinite {
 public:
  InjectedNonfinite(std::int64_t step, int rank) {
    train::FaultHooks hooks;
    if (step > 0)
      hooks.fault = [step, rank](train::FaultKind kind, std::int64_t s, int r) {
        return kind == train::FaultKind::NonfiniteGradient && s == step && r == rank;
      };
    train::set_fault_hooks(hooks);
  }
  ~InjectedNonfinite() { train::set_fault_hooks({}); }
};

// Two stages of tied_mlp: one piece each, or two (split 2,4,6) for the kinds with two chunks.
Run run(ScheduleKind kind, UpdateValidation validation, int replicas, const Scenario& scenario) {
  const int chunks = pipeline::default_chunks(kind);
  test::JobShape shape{kind, 2, 4, chunks, chunks == 1 ? std::vector<int>{4} : std::vector<int>{2, 4, 6}, "none",
                       replicas};
  auto job = test::job_of(test::tied_mlp(), shape, 16);
  job.optimizer.kind = models::OptimizerKind::Adam;
  job.optimizer.lr = 0.01;
  job.recovery.clip_grad_norm = scenario.clip;
  job.recovery.update_validation = validation;
  job.numerics.precision = scenario.precision;
  InjectedNonfinite fault(scenario.nonfinite_step, scenario.nonfinite_rank);
  train::EmbeddedJob trainer(train::plan_job(job));
  auto data = models::data::make_synthetic_images(256, {1, 12, 12}, 10, 5);
  models::data::DataLoader loader(*data, 16, models::data::Shuffle::Yes, 3, models::data::LastBatch::Drop);
  loader.start_epoch(0);
  Run r;
  for (int i = 0; i < kSteps; ++i) {
    const auto outcome = trainer.step(*loader.next());
    r.losses.push_back(outcome.loss);
    r.skipped.push_back(outcome.skipped);
    r.norms.push_back(outcome.gradient_norm);
  }
  for (auto& [name, p] : trainer.named_parameters()) r.weights.emplace_back(name, p->value.to_float_vector());
  return r;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

void check_bitwise_equal(const Run& got, const Run& want) {
  BOOST_REQUIRE_EQUAL(got.losses.size(), want.losses.size());
  for (std::size_t i = 0; i < got.losses.size(); ++i) {
    BOOST_TEST(same_bits(got.losses[i], want.losses[i]), "step " << i + 1 << ": loss " << got.losses[i] << " vs "
                                                                  << want.losses[i]);
    BOOST_TEST(got.skipped[i] == want.skipped[i], "step " << i + 1);
  }
  BOOST_REQUIRE_EQUAL(got.weights.size(), want.weights.size());
  for (std::size_t i = 0; i < got.weights.size(); ++i) {
    const auto& [name, w] = want.weights[i];
    BOOST_TEST_CONTEXT(name) {
      BOOST_REQUIRE(got.weights[i].first == name);
      BOOST_REQUIRE_EQUAL(got.weights[i].second.size(), w.size());
      BOOST_TEST(std::memcmp(got.weights[i].second.data(), w.data(), w.size() * sizeof(float)) == 0);
    }
  }
}

const Scenario kScenarios[] = {
    // Rank 1 (the last stage) turns non-finite at step 2: rank 0 has updated and must undo.
    {"nonfinite gradient on rank 1 at step 2", 0.0, 2, 1},
    // Rank 0 at step 3: every other rank undoes.
    {"nonfinite gradient on rank 0 at step 3", 0.0, 3, 0},
    // A norm far above the clip: every step is clipped, so every stage redoes every update.
    {"clipped every step", 1e-3, 0, 0},
    // fp16: the provisional update divides the gradients by the loss scale in place, so the redo
    // starts from the gradients saved before it.
    {"fp16, clipped every step", 1e-3, 0, 0, models::Precision::Fp16},
    {"fp16, nonfinite gradient on rank 1 at step 2", 0.0, 2, 1, models::Precision::Fp16},
};

}  // namespace

BOOST_AUTO_TEST_SUITE(step_guard_post_validation)

// The guard's two halves on their own: `report` sends and answers at once with the provisional
// decision; `verdict` collects (here: rank 1's figures, given) and decides for the whole job.
BOOST_AUTO_TEST_CASE(report_sends_without_collecting_and_verdict_collects_and_decides) {
  std::vector<std::vector<double>> sent;
  int collected = 0;
  std::vector<double> rank1 = {1.0, 12.0, 0.0, 1.0};   // finite, squared norm share 12
  train::StepGuard guard(0, 2, /*clip_norm=*/1.0, train::ServerRowsInNorm::Counted,
                         {[&](const std::vector<double>& values, std::int64_t) { sent.push_back(values); },
                          [&](const std::vector<double>& values, std::int64_t) {
                            ++collected;
                            return std::vector<std::vector<double>>{values, rank1};
                          }});
  guard.set_loss_scale(4.0);
  models::Parameter p;
  p.value = kernels::Tensor::zeros({2});
  p.grad = kernels::Tensor::from_vector(std::vector<float>{4.0f, 8.0f}, {2});   // squares 80 at scale 4
  const auto provisional = guard.report(0, {{&p}, {}}, 0.0, 1.5);
  BOOST_TEST(sent.size() == 1u);
  BOOST_TEST(collected == 0);
  BOOST_TEST((provisional.action == pipeline::UpdateAction::Apply));
  BOOST_TEST(provisional.gradient_scale == 0.25);   // only the loss scale divided out
  const auto verdict = guard.verdict(0);
  BOOST_TEST(collected == 1);
  // Norm sqrt(80 + 12) / 4 = 2.40 > 1: clipped by 1 / (norm + 1e-6), then unscaled.
  const double norm = std::sqrt(92.0) / 4.0;
  BOOST_TEST(guard.last_gradient_norm() == norm);
  BOOST_TEST(verdict.gradient_scale == (1.0 / (norm + 1e-6)) / 4.0);
  BOOST_CHECK_THROW(guard.verdict(0), std::exception);   // nothing reported since

  // A non-finite gradient here: the provisional decision is already a skip, and so is the verdict.
  p.grad = kernels::Tensor::from_vector(std::vector<float>{std::nanf(""), 1.0f}, {2});
  BOOST_TEST((guard.report(1, {{&p}, {}}, 0.0, 1.5).action == pipeline::UpdateAction::Skip));
  BOOST_TEST((guard.verdict(1).action == pipeline::UpdateAction::Skip));
  BOOST_TEST(guard.last_nonfinite_rank() == 0);
  // Finite here, not on rank 1: provisionally applied, then skipped.
  p.grad = kernels::Tensor::from_vector(std::vector<float>{0.1f, 0.1f}, {2});
  rank1 = {0.0, 0.0, 0.0, 1.0};
  BOOST_TEST((guard.report(2, {{&p}, {}}, 0.0, 1.5).action == pipeline::UpdateAction::Apply));
  BOOST_TEST((guard.verdict(2).action == pipeline::UpdateAction::Skip));
  BOOST_TEST(guard.last_nonfinite_rank() == 1);
}

BOOST_AUTO_TEST_CASE(zb_h1_validating_after_the_update_trains_bitwise_as_validating_before_and_as_1f1b) {
  for (const int replicas : {1, 2}) {
    for (const auto& scenario : kScenarios) {
      BOOST_TEST_CONTEXT(replicas << " replica(s), " << scenario.name) {
        const Run after = run(ScheduleKind::ZeroBubbleH1, UpdateValidation::Auto, replicas, scenario);
        const Run before = run(ScheduleKind::ZeroBubbleH1, UpdateValidation::Before, replicas, scenario);
        const Run one_f_one_b = run(ScheduleKind::OneFOneB, UpdateValidation::Auto, replicas, scenario);
        for (int i = 0; i < kSteps; ++i) {
          const bool nonfinite = i + 1 == scenario.nonfinite_step;
          BOOST_TEST(after.skipped[static_cast<std::size_t>(i)] == nonfinite, "step " << i + 1);
          if (scenario.clip > 0.0) BOOST_TEST(after.norms[static_cast<std::size_t>(i)] > scenario.clip);
        }
        check_bitwise_equal(after, before);
        check_bitwise_equal(after, one_f_one_b);
      }
    }
  }
}

// The other zero-bubble kinds post-validate too (pipeline/update_check.h): their undo and redo
// give bitwise what validating first gives. Their gradients are not summed in 1f1b's order
// (another piece order per stage), so 1f1b is not the reference here.
BOOST_AUTO_TEST_CASE(every_other_zero_bubble_kind_validating_after_the_update_trains_bitwise_as_validating_before) {
  const ScheduleKind kinds[] = {ScheduleKind::ZeroBubbleH2, ScheduleKind::ZeroBubbleV,
                                ScheduleKind::VHalf,        ScheduleKind::VMin,
                                ScheduleKind::InterleavedZeroBubble, ScheduleKind::DualPipeV};
  for (const auto kind : kinds) {
    BOOST_REQUIRE(pipeline::resolve_update_validation(UpdateValidation::Auto, kind, models::OptimizerOffload::None) ==
                  UpdateValidation::After);
    for (const auto& scenario : {kScenarios[0], kScenarios[1], kScenarios[2], kScenarios[4]}) {
      BOOST_TEST_CONTEXT(pipeline::schedule_kind_name(kind) << ", " << scenario.name) {
        const Run after = run(kind, UpdateValidation::Auto, 2, scenario);
        const Run before = run(kind, UpdateValidation::Before, 2, scenario);
        for (int i = 0; i < kSteps; ++i)
          BOOST_TEST(after.skipped[static_cast<std::size_t>(i)] == (i + 1 == scenario.nonfinite_step), "step " << i + 1);
        check_bitwise_equal(after, before);
      }
    }
  }
}

// Offloaded optimizer state: Auto waits for the verdict with every schedule (saving the host state
// for an undo would copy all of it every step); a stated choice stands.
BOOST_AUTO_TEST_CASE(an_offloaded_optimizer_validates_before_its_update_unless_told_otherwise) {
  using models::OptimizerOffload;
  for (const auto kind : {ScheduleKind::OneFOneB, ScheduleKind::ZeroBubbleH1, ScheduleKind::DualPipeV}) {
    BOOST_TEST_CONTEXT(pipeline::schedule_kind_name(kind)) {
      BOOST_TEST((pipeline::resolve_update_validation(UpdateValidation::Auto, kind, OptimizerOffload::Host) ==
                  UpdateValidation::Before));
      BOOST_TEST((pipeline::resolve_update_validation(UpdateValidation::After, kind, OptimizerOffload::Host) ==
                  UpdateValidation::After));
    }
  }
  BOOST_TEST((pipeline::resolve_update_validation(UpdateValidation::Auto, ScheduleKind::ZeroBubbleH1,
                                                  OptimizerOffload::None) == UpdateValidation::After));
}

BOOST_AUTO_TEST_SUITE_END()
