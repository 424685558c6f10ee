// Single-device training: the loss falls, runs repeat bit for bit, optimizers behave.
#include <boost/test/unit_test.hpp>

#include "models/data/data_loader.h"
#include "models/data/dataset.h"
#include "kernels/runtime.h"
#include "models/loss.h"
#include "models/trainer.h"
#include "models/zoo/model_spec.h"
#include "tests/support/test_util.h"

using namespace pw;
using namespace pw::models;

namespace {

std::vector<double> train_losses(const std::string& model_name, OptimizerKind kind, std::uint64_t seed, int steps) {
  auto data = data::make_synthetic_images(512, {1, 12, 12}, 10, seed);
  ModelOptions mo;
  mo.width = 4;
  mo.sample_shape = data->sample_shape();
  auto model = build_model(make_model_spec(model_name, mo), seed);
  OptimizerConfig oc;
  oc.kind = kind;
  oc.lr = kind == OptimizerKind::Sgd ? 0.05 : 0.01;
  Optimizer opt(model->parameters(), oc);
  Trainer trainer(*model, opt, kernels::Device::cpu());
  data::DataLoader loader(*data, 32, data::Shuffle::Yes, seed, data::LastBatch::Drop);
  std::vector<double> losses;
  for (int epoch = 0; static_cast<int>(losses.size()) < steps; ++epoch) {
    loader.start_epoch(epoch);
    while (auto batch = loader.next()) {
      losses.push_back(trainer.train_step(*batch).loss);
      if (static_cast<int>(losses.size()) == steps) break;
    }
  }
  return losses;
}

double mean(const std::vector<double>& v, std::size_t from, std::size_t to) {
  double s = 0;
  for (std::size_t i = from; i < to; ++i) s += v[i];
  return s / static_cast<double>(to - from);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(training)

BOOST_AUTO_TEST_CASE(loss_falls_with_every_optimizer) {
  for (auto kind : {OptimizerKind::Sgd, OptimizerKind::Adam, OptimizerKind::Adagrad}) {
    BOOST_TEST_CONTEXT(optimizer_kind_name(kind)) {
      const auto losses = train_losses("seed-cnn", kind, 1, 48);
      BOOST_CHECK_LT(mean(losses, 40, 48), 0.7 * mean(losses, 0, 8));
    }
  }
}

BOOST_AUTO_TEST_CASE(resnet_trains_and_runs_repeat_bit_for_bit) {
  const auto a = train_losses("resnet18", OptimizerKind::Sgd, 5, 16);
  const auto b = train_losses("resnet18", OptimizerKind::Sgd, 5, 16);
  BOOST_CHECK(a == b);
  const auto c = train_losses("resnet18", OptimizerKind::Sgd, 6, 16);
  BOOST_CHECK(a != c);
  BOOST_CHECK_LT(mean(a, 12, 16), mean(a, 0, 4));
}

BOOST_AUTO_TEST_CASE(optimizer_rejects_bad_settings) {
  BOOST_CHECK_THROW(parse_optimizer_kind("rmsprop"), InputError);
  OptimizerConfig oc;
  oc.lr = 0;
  BOOST_CHECK_THROW(Optimizer({}, oc), InputError);
}

BOOST_AUTO_TEST_CASE(device_memory_cap_stops_a_batch_that_does_not_fit) {
  // cpu:7 is a logical device of its own, with its own cap.
  const auto dev = kernels::Device::cpu(7);
  kernels::DeviceRuntime::get(dev).set_memory_cap(2 << 20);
  ModelOptions mo;
  mo.width = 16;
  auto model = build_model(make_model_spec("resnet18", mo), 1);
  BOOST_CHECK_THROW(model->to(dev), kernels::OutOfMemory);
  kernels::DeviceRuntime::get(dev).set_memory_cap(0);
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(top_k)

BOOST_AUTO_TEST_CASE(counts_labels_among_the_k_highest_logits) {
  // Row 0: label 2 has the 3rd highest logit; row 1: label 0 the lowest of 7; row 2: a tie at the top.
  const std::vector<double> z = {0.1, 0.9, 0.5, 0.7, 0.0, 0.2, 0.3,     //
                                 -5.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0,   //
                                 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0};
  const auto logits = kernels::Tensor::from_vector(z, {3, 7});
  const auto labels = kernels::Tensor::from_vector(std::vector<std::int64_t>{2, 0, 1}, {3});
  BOOST_CHECK_EQUAL(top_k_hits(logits, labels, 1), 1);   // only the tie row
  BOOST_CHECK_EQUAL(top_k_hits(logits, labels, 2), 1);
  BOOST_CHECK_EQUAL(top_k_hits(logits, labels, 3), 2);
  BOOST_CHECK_EQUAL(top_k_hits(logits, labels, 5), 2);
  BOOST_CHECK_EQUAL(top_k_hits(logits, labels, 7), 3);
  BOOST_CHECK_THROW(top_k_hits(logits, kernels::Tensor::from_vector(std::vector<std::int64_t>{2, 0, 9}, {3}), 5), Error);
}

BOOST_AUTO_TEST_SUITE_END()
