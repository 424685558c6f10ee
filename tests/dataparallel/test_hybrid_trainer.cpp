// Hybrid data + model parallelism in one process: 2 replicas x 2 stages follow 1 replica x 1 stage
// given the global batch, step by step; the replicas stay identical.
#include <cmath>
#include <random>

#include <boost/test/unit_test.hpp>

#include "dataparallel/hybrid_trainer.h"
#include "models/zoo/model_spec.h"
#include "partition/model_description.h"
#include "partition/partitioners.h"

using namespace pw;

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

pipeline::PipelineOptions options(int stages, int micro_batches, int first_device, int devices) {
  pipeline::PipelineOptions o;
  o.spec.kind = pipeline::ScheduleKind::OneFOneB;
  o.spec.stages = stages;
  o.spec.micro_batches = micro_batches;
  for (int d = 0; d < devices; ++d) o.devices.push_back(kernels::Device::cpu(first_device + d));
  o.optimizer.kind = models::OptimizerKind::Sgd;
  o.optimizer.lr = 0.05;
  o.optimizer.momentum = 0.9;
  o.seed = 11;
  return o;
}

std::vector<float> weights(pipeline::PipelineTrainer& t) {
  std::vector<float> all;
  for (auto& [name, p] : t.named_parameters()) {
    const auto v = p->value.to_float_vector();
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(hybrid_trainer)

BOOST_AUTO_TEST_CASE(two_replicas_of_two_stages_follow_one_stage_with_the_global_batch) {
  models::ModelOptions mo;
  const auto model = partition::describe(models::make_model_spec("seed-cnn", mo));
  const auto whole = partition::partition_uniform(model.layer_count(), 1);
  const auto halves = partition::split_at(model.layer_count(), {4});
  // Micro-batch j of the single pipeline holds the same rows as micro-batch j % 2 of replica j / 2.
  pipeline::PipelineTrainer single(model, whole, options(1, 4, 0, 1));
  for (std::size_t bucket : {std::size_t{1} << 10, std::size_t{25} << 20}) {
    BOOST_TEST_CONTEXT("bucket " << bucket << " bytes") {
      pipeline::PipelineTrainer reference(model, whole, options(1, 4, 0, 1));
      dp::HybridTrainer hybrid(model, halves, options(2, 2, 1, 4), 2, {bucket, dp::Compression::None});
      for (unsigned step = 0; step < 4; ++step) {
        const auto batch = random_batch(32, 100 + step);
        const auto a = reference.train_step(batch);
        const auto b = hybrid.train_step(batch);
        BOOST_TEST(b.samples == 32);
        BOOST_TEST(std::abs(a.loss - b.loss) / a.loss <= 1e-5, "step " << step << ": " << a.loss << " vs " << b.loss);
        BOOST_TEST(a.correct == b.correct);
      }
      const auto ref = weights(reference);
      const auto w0 = weights(hybrid.replica(0));
      const auto w1 = weights(hybrid.replica(1));
      BOOST_TEST(w0 == w1);   // replicas stay bit-identical
      BOOST_REQUIRE_EQUAL(ref.size(), w0.size());
      double worst = 0.0;
      for (std::size_t i = 0; i < ref.size(); ++i)
        worst = std::max(worst, std::abs(static_cast<double>(ref[i]) - w0[i]) / (std::abs(ref[i]) + 1e-3));
      BOOST_TEST(worst <= 1e-4, "largest relative weight difference " << worst);
      const auto stats = hybrid.reduce_stats();
      BOOST_TEST(stats.size() == 4u);
      if (bucket == (std::size_t{1} << 10)) BOOST_TEST(stats[1].buckets > 1);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_global_batch_that_does_not_split_is_refused) {
  models::ModelOptions mo;
  const auto model = partition::describe(models::make_model_spec("seed-cnn", mo));
  dp::HybridTrainer hybrid(model, partition::split_at(model.layer_count(), {4}), options(2, 2, 0, 4), 2, {});
  BOOST_CHECK_THROW(hybrid.train_step(random_batch(6, 1)), InputError);   // 3 per replica, 2 micro-batches
}

BOOST_AUTO_TEST_SUITE_END()
