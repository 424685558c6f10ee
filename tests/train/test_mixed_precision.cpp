// Mixed precision in the engine: bf16 pipelines against one stage, activations at half the bytes
// on the stage boundaries, fp16 loss scaling agreed by every rank (an overflow skips the step
// everywhere, leaves the weights alone and halves the scale; good steps double it), F32 master
// weights in checkpoints, and one-line errors for bad precision settings.
#include <cstdlib>
#include <map>

#include <boost/test/unit_test.hpp>

#include "core/error.h"
#include "models/data/data_loader.h"
#include "models/data/dataset.h"
#include "models/zoo/model_spec.h"
#include "partition/partitioners.h"
#include "tests/train/job_test_util.h"
#include "train/embedded_job.h"

using namespace pw;
using pw::test::job_of;
using pw::test::JobShape;

namespace {

partition::ModelDescription seed_cnn() {
  models::ModelOptions o;
  o.sample_shape = {1, 12, 12};
  return partition::describe(models::make_model_spec("seed-cnn", o));   // conv1 relu1 pool1 flatten fc1 relu2 fc2
}

train::JobConfig job(const JobShape& shape, const std::string& precision) {
  auto c = job_of(seed_cnn(), shape, 16);
  c.numerics.precision = parse_enum<models::Precision>(precision);
  return c;
}

struct Run {
  std::vector<double> losses;
  std::vector<train::StepOutcome> outcomes;
  std::map<std::string, std::vector<double>> weights;
};

using Weights = std::map<std::string, std::vector<double>>;

Weights weights_of(train::EmbeddedJob& job) {
  Weights out;
  for (auto& [name, p] : job.named_parameters()) out[name] = p->value.to_double_vector();
  return out;
}

Run train_steps(train::EmbeddedJob& trainer, int steps) {
  auto data = models::data::make_synthetic_images(256, {1, 12, 12}, 10, 5);
  models::data::DataLoader loader(*data, 16, models::data::Shuffle::Yes, 3, models::data::LastBatch::Drop);
  loader.start_epoch(0);
  Run run;
  for (int i = 0; i < steps; ++i) {
    run.outcomes.push_back(trainer.step(*loader.next()));
    run.losses.push_back(run.outcomes.back().loss);
  }
  run.weights = weights_of(trainer);
  return run;
}

Run train_job(const train::JobConfig& c, int steps) {
  train::EmbeddedJob trainer(train::plan_job(c));
  return train_steps(trainer, steps);
}

// Relative L2 distance of two weight sets, the largest over the parameters.
double weight_distance(const Weights& a, const Weights& b) {
  double worst = 0.0;
  for (const auto& [name, w] : b) {
    const auto& v = a.at(name);
    double num = 0.0, den = 0.0;
    for (std::size_t i = 0; i < w.size(); ++i) {
      num += (v[i] - w[i]) * (v[i] - w[i]);
      den += w[i] * w[i];
    }
    worst = std::max(worst, std::sqrt(num / std::max(den, 1e-30)));
  }
  return worst;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(mixed_precision)

BOOST_AUTO_TEST_CASE(a_four_stage_bf16_pipeline_trains_as_one_bf16_stage) {
  const Run one = train_job(job({pipeline::ScheduleKind::OneFOneB, 1, 4}, "bf16"), 4);
  const Run four = train_job(job({pipeline::ScheduleKind::OneFOneB, 4, 4, 1, {1, 3, 5}}, "bf16"), 4);
  // Both round the same activations to bf16 at the same layers; what may differ is the order of
  // F32 sums inside oneDNN between runs of different shapes: far below bf16's 2^-8.
  for (std::size_t i = 0; i < one.losses.size(); ++i)
    BOOST_CHECK_SMALL(std::abs(four.losses[i] - one.losses[i]) / one.losses[i], 1e-3);
  BOOST_CHECK_SMALL(weight_distance(four.weights, one.weights), 1e-3);
  // And bf16 is not fp32 in disguise: the same job in fp32 takes nearly the same steps. Compared
  // as updates (weights after minus weights before): bf16 rounds activations and activation
  // gradients to 8 significant bits, so a bias gradient (a sum over the batch that mostly cancels)
  // can be off by several percent while the losses agree closely.
  const Run fp32 = train_job(job({pipeline::ScheduleKind::OneFOneB, 1, 4}, "fp32"), 4);
  train::EmbeddedJob untrained(train::plan_job(job({pipeline::ScheduleKind::OneFOneB, 1, 4}, "fp32")));
  const Weights start = weights_of(untrained);
  auto update = [&](const Weights& w) {
    Weights d;
    for (const auto& [name, v] : w) {
      auto& out = d[name];
      for (std::size_t i = 0; i < v.size(); ++i) out.push_back(v[i] - start.at(name)[i]);
    }
    return d;
  };
  const double apart = weight_distance(update(one.weights), update(fp32.weights));
  BOOST_TEST_MESSAGE("bf16 vs fp32 updates after 4 steps, the worst parameter: " << apart);
  BOOST_CHECK_GT(apart, 1e-4);
  BOOST_CHECK_SMALL(apart, 0.25);
  for (std::size_t i = 0; i < one.losses.size(); ++i) {
    BOOST_TEST_MESSAGE("loss " << i << ": bf16 " << one.losses[i] << ", fp32 " << fp32.losses[i]);
    BOOST_CHECK_SMALL(std::abs(one.losses[i] - fp32.losses[i]) / fp32.losses[i], 1e-2);
  }
}

BOOST_AUTO_TEST_CASE(bf16_activations_cross_stage_boundaries_at_half_the_bytes) {
  const JobShape four{pipeline::ScheduleKind::OneFOneB, 4, 4, 1, {1, 3, 5}};
  const Run fp32 = train_job(job(four, "fp32"), 1);
  const Run bf16 = train_job(job(four, "bf16"), 1);
  const auto fp32_bytes = fp32.outcomes.back().boundary_bytes;
  const auto bf16_bytes = bf16.outcomes.back().boundary_bytes;
  BOOST_TEST_MESSAGE("boundary bytes per step, 4 stages: fp32 " << fp32_bytes << ", bf16 " << bf16_bytes);
  // conv1 -> relu1 -> pool1 -> ... : 3 boundaries, 16 samples, activations both ways.
  BOOST_CHECK_GT(fp32_bytes, 0);
  BOOST_CHECK_EQUAL(bf16_bytes * 2, fp32_bytes);
}

// The loader hands a mixed-precision job its inputs in the activation dtype when the first layer is
// a convolution or a linear layer, which would round them to that dtype anyway: half the bytes
// loaded, pinned and copied, and the same training bit for bit.
BOOST_AUTO_TEST_CASE(sixteen_bit_loader_inputs_train_bitwise_as_float_inputs) {
  const JobShape two{pipeline::ScheduleKind::OneFOneB, 2, 2, 1, {2}};
  for (const std::string precision : {"bf16", "fp16"}) {
    const auto config = job(two, precision);
    train::EmbeddedJob as_float(train::plan_job(config));
    train::EmbeddedJob as_half(train::plan_job(config));
    const auto half = models::activation_dtype(config.numerics.precision);
    BOOST_TEST(kernels::dtype_name(as_half.engine(0).loader_input_dtype()) == kernels::dtype_name(half));   // stage 0 starts with conv1
    BOOST_TEST(kernels::dtype_name(as_half.engine(1).loader_input_dtype()) == "F32");   // reads no inputs
    auto data = models::data::make_synthetic_images(256, {1, 12, 12}, 10, 5);
    models::data::DataLoader loader(*data, 16, models::data::Shuffle::Yes, 3, models::data::LastBatch::Drop);
    loader.start_epoch(0);
    for (int i = 0; i < 4; ++i) {
      auto batch = *loader.next();
      const double loss = as_float.step(batch).loss;
      batch.images = batch.images.to(half);
      BOOST_TEST(as_half.step(batch).loss == loss, precision << " step " << i);
    }
    BOOST_TEST(weight_distance(weights_of(as_half), weights_of(as_float)) == 0.0);
  }
  // fp32 jobs, and first layers that do not round their input, keep F32 inputs.
  train::EmbeddedJob fp32(train::plan_job(job(two, "fp32")));
  BOOST_TEST(kernels::dtype_name(fp32.engine(0).loader_input_dtype()) == "F32");
}

BOOST_AUTO_TEST_CASE(an_fp16_overflow_skips_the_step_on_every_rank_and_halves_the_scale) {
  // 2 stages x 2 replicas starting at loss scale 2^24: the scaled loss gradient (up to 2^24 / 16
  // per logit) does not fit fp16 (65504), so the first steps overflow for real. Each such step is
  // skipped by every rank, moves no weight on any replica, and halves every rank's scale, until
  // the scale fits and a step applies.
  JobShape shape{pipeline::ScheduleKind::OneFOneB, 2, 2, 1, {3}};
  shape.replicas = 2;
  auto c = job(shape, "fp16");
  c.numerics.initial_loss_scale = 16777216;
  c.numerics.loss_scale_window = 1000;
  train::EmbeddedJob trainer(train::plan_job(c));
  auto data = models::data::make_synthetic_images(256, {1, 12, 12}, 10, 5);
  models::data::DataLoader loader(*data, 16, models::data::Shuffle::Yes, 3, models::data::LastBatch::Drop);
  loader.start_epoch(0);
  auto replica_weights = [&](int r) {
    Weights w;
    for (auto& [name, p] : trainer.named_parameters(r)) w[name] = p->value.to_double_vector();
    return w;
  };
  const std::vector<Weights> start{replica_weights(0), replica_weights(1)};
  double scale = 16777216;
  int overflows = 0;
  train::StepOutcome outcome;
  for (int step = 0; step < 12; ++step) {
    outcome = trainer.step(*loader.next());
    BOOST_TEST_CONTEXT("step " << step) {
      BOOST_CHECK_EQUAL(outcome.loss_scale, scale);
      BOOST_CHECK(std::isfinite(outcome.loss));
      if (!outcome.skipped) break;
      BOOST_CHECK(outcome.overflow);
      BOOST_CHECK_GE(outcome.nonfinite_rank, 0);
      ++overflows;
      scale /= 2;
      for (int r = 0; r < 2; ++r) BOOST_CHECK(replica_weights(r) == start[static_cast<std::size_t>(r)]);
      for (int rank = 0; rank < trainer.world_size(); ++rank)
        BOOST_CHECK_EQUAL(trainer.engine(rank).loss_scaler().scale(), scale);
    }
  }
  BOOST_TEST_MESSAGE(overflows << " overflowing steps before the scale fit (" << scale << ")");
  BOOST_CHECK_GE(overflows, 3);   // 2^24, 2^23 and 2^22 cannot fit: 2^22 / 16 > 65504 * 4
  BOOST_CHECK(!outcome.skipped);
  BOOST_CHECK(replica_weights(0) != start[0]);
  BOOST_CHECK(replica_weights(0) == replica_weights(1));
  for (int rank = 0; rank < trainer.world_size(); ++rank)
    BOOST_CHECK_EQUAL(trainer.engine(rank).loss_scaler().overflows(), overflows);
}

BOOST_AUTO_TEST_CASE(fp16_unscales_its_gradients_and_grows_the_scale_after_a_window) {
  // A loss scale must not change what a step does (up to fp16 rounding): weights after training
  // at scale 1 and at scale 2^12 agree, and the reported gradient norm is the unscaled one.
  auto fixed = job({pipeline::ScheduleKind::OneFOneB, 2, 2, 1, {3}}, "fp16");
  fixed.numerics.loss_scale = 1;
  auto scaled = fixed;
  scaled.numerics.loss_scale = 4096;
  const Run at_one = train_job(fixed, 3);
  const Run at_4096 = train_job(scaled, 3);
  BOOST_CHECK_SMALL(weight_distance(at_4096.weights, at_one.weights), 5e-3);
  BOOST_CHECK_CLOSE(at_4096.outcomes.back().gradient_norm, at_one.outcomes.back().gradient_norm, 1.0);
  BOOST_CHECK_EQUAL(at_4096.outcomes.back().loss_scale, 4096.0);

  auto dynamic = fixed;
  dynamic.numerics.loss_scale = 0;
  dynamic.numerics.initial_loss_scale = 256;
  dynamic.numerics.loss_scale_window = 2;
  const Run grown = train_job(dynamic, 5);
  std::vector<double> scales;
  for (const auto& o : grown.outcomes) scales.push_back(o.loss_scale);
  BOOST_CHECK((scales == std::vector<double>{256, 256, 512, 512, 1024}));
}

BOOST_AUTO_TEST_CASE(checkpoints_hold_fp32_master_weights) {
  for (const std::string precision : {"bf16", "fp16"}) {
    BOOST_TEST_CONTEXT(precision) {
      train::EmbeddedJob trainer(train::plan_job(job({pipeline::ScheduleKind::OneFOneB, 2, 2, 1, {3}}, precision)));
      train_steps(trainer, 2);
      int tensors = 0;
      for (int rank = 0; rank < trainer.world_size(); ++rank)
        for (const auto& part : trainer.engine(rank).checkpoint_parts())
          for (const auto& [name, t] : part.tensors) {
            BOOST_TEST_CONTEXT(name) { BOOST_CHECK(t.dtype() == kernels::DType::F32); }
            ++tensors;
          }
      BOOST_CHECK_GT(tensors, 0);
      // The parameters the optimizer updates are F32; the layers' 16-bit copies are separate.
      for (auto& [name, p] : trainer.named_parameters()) {
        BOOST_CHECK(p->value.dtype() == kernels::DType::F32);
        BOOST_CHECK(p->grad.dtype() == kernels::DType::F32);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(bad_precision_settings_get_one_line_errors) {
  BOOST_CHECK_EXCEPTION(job({}, "fp8"), InputError, [](const InputError& e) {
    return std::string(e.what()) == "unknown precision 'fp8'; accepted: fp32, bf16, fp16";
  });
  auto c = job({}, "bf16");
  c.numerics.loss_scale = 128;
  BOOST_CHECK_EXCEPTION(train::plan_job(c), InputError, [](const InputError& e) {
    return std::string(e.what()).find("/numerics/loss_scale: applies to /numerics/precision fp16 only") != std::string::npos;
  });
  c = job({}, "fp16");
  c.numerics.initial_loss_scale = 0.5;
  BOOST_CHECK_THROW(train::plan_job(c), InputError);
}

BOOST_AUTO_TEST_SUITE_END()
