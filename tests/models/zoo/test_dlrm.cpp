// DLRM from the zoo: shapes, parameter names, gradients against finite differences, the split
// backward, and training on synthetic clicks up to a test AUC well above chance.
#include <boost/test/unit_test.hpp>

#include "models/data/synthetic_clicks.h"
#include "models/loss.h"
#include "models/optimizer.h"
#include "models/trainer.h"
#include "models/zoo/model_spec.h"
#include "tests/support/test_util.h"

using namespace pw;
using namespace pw::models;
using kernels::Tensor;

namespace {

ModelOptions small_options() {
  ModelOptions o;
  o.clicks.dense = 3;
  o.clicks.table_sizes = {20, 30};
  o.clicks.bag_size = 2;
  o.embedding_dim = 4;
  o.bottom_mlp = {6};
  o.top_mlp = {5};
  return o;
}

data::Batch click_batch(const data::ClickFeatures& f, std::int64_t n, std::uint64_t seed) {
  const auto set = data::make_synthetic_clicks(f, n, seed, data::Split::Train);
  data::Batch b{Tensor::empty({n, f.width()}), Tensor::empty({n}, kernels::DType::I64)};
  for (std::int64_t i = 0; i < n; ++i) set->fill(i, b.images.data<float>() + i * f.width(), b.labels.data<std::int64_t>()[i]);
  return b;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(dlrm)

BOOST_AUTO_TEST_CASE(spec_shapes_and_names) {
  const ModelOptions o = small_options();
  const ModelSpec spec = make_model_spec("dlrm", o);
  BOOST_TEST((spec.objective == Objective::BinaryCrossEntropy));
  BOOST_TEST(spec.sample_shape == kernels::Shape({3 + 2 * 2}), boost::test_tools::per_element());
  BOOST_TEST(spec.layers.front().name == "features");
  BOOST_TEST(spec.layers[1].name == "interaction");
  auto model = build_model(spec, 1);
  BOOST_TEST(model->output_shape({8, 7}) == kernels::Shape({8, 1}), boost::test_tools::per_element());
  std::vector<std::string> names;
  for (auto& [name, p] : model->named_parameters()) names.push_back(name);
  BOOST_TEST(std::count(names.begin(), names.end(), "features.emb.1.weight") == 1);
  BOOST_TEST(std::count(names.begin(), names.end(), "features.bottom.0.weight") == 1);
  BOOST_TEST(model_stats(spec).parameters == model->parameter_count());
  BOOST_CHECK_THROW(model->forward(Tensor::zeros({2, 6}), Mode::Train), InputError);
  // An id column holding a non-integer or an id past its table is a one-line input error.
  Tensor bad = click_batch(o.clicks, 2, 1).images;
  bad.data<float>()[3] = 2.5f;
  BOOST_CHECK_THROW(model->forward(bad, Mode::Train), InputError);
  bad.data<float>()[3] = 20.0f;
  BOOST_CHECK_THROW(model->forward(bad, Mode::Train), InputError);
}

BOOST_AUTO_TEST_CASE(gradients_match_finite_differences) {
  const ModelOptions o = small_options();
  auto model = build_model(make_model_spec("dlrm", o), 3);
  const data::Batch b = click_batch(o.clicks, 16, 4);
  auto out = model->forward(b.images, Mode::Train);
  model->backward(*out.ctx, binary_cross_entropy_with_logits(out.y, b.labels, 1.0 / 16).grad_logits);
  const auto loss_of = [&] { return binary_cross_entropy_with_logits(model->forward(b.images, Mode::Eval).y, b.labels, 1.0).loss; };
  int checked = 0;
  for (auto& [name, p] : model->named_parameters()) {
    for (std::int64_t k = 0; k < 4; ++k) {
      // Embedding rows: pick ones the batch uses (ids repeat, so low rows are hot).
      const std::int64_t i = name.find("emb") != std::string::npos ? k * p->value.dim(1) + k : (k * 7919) % p->value.numel();
      float* v = p->value.data<float>();
      const float keep = v[i];
      const double eps = 2e-3;   // small enough to rarely cross a ReLU kink, large for F32 round-off
      v[i] = keep + static_cast<float>(eps);
      const double up = loss_of();
      v[i] = keep - static_cast<float>(eps);
      const double down = loss_of();
      v[i] = keep;
      const double numeric = (up - down) / (2 * eps);
      const double analytic = p->grad.data<float>()[i];
      BOOST_TEST_CONTEXT(name << "[" << i << "]") { BOOST_CHECK_SMALL(analytic - numeric, 5e-4 + 3e-2 * std::abs(numeric)); }
      ++checked;
    }
  }
  BOOST_TEST(checked >= 36);
}

BOOST_AUTO_TEST_CASE(split_backward_equals_full_backward) {
  const ModelOptions o = small_options();
  auto a = build_model(make_model_spec("dlrm", o), 5);
  auto b = build_model(make_model_spec("dlrm", o), 5);
  const data::Batch batch = click_batch(o.clicks, 8, 6);
  auto oa = a->forward(batch.images, Mode::Train);
  a->backward(*oa.ctx, binary_cross_entropy_with_logits(oa.y, batch.labels, 0.125).grad_logits);
  auto ob = b->forward(batch.images, Mode::Train);
  b->backward_input(*ob.ctx, binary_cross_entropy_with_logits(ob.y, batch.labels, 0.125).grad_logits);
  b->backward_weight(*ob.ctx);
  auto pa = a->named_parameters(), pb = b->named_parameters();
  for (std::size_t i = 0; i < pa.size(); ++i) test::check_close(pb[i].second->grad, pa[i].second->grad, 1e-6, 1e-7, pa[i].first);
}

BOOST_AUTO_TEST_CASE(trains_on_synthetic_clicks_to_a_test_auc_well_above_chance) {
  const ModelOptions o;   // defaults: 4 dense, three tables of 1000 rows, bag 2, dim 8
  const ModelSpec spec = make_model_spec("dlrm", o);
  auto model = build_model(spec, 7);
  const auto train = data::make_synthetic_clicks(o.clicks, 40000, 11, data::Split::Train);
  const auto test = data::make_synthetic_clicks(o.clicks, 5000, 11, data::Split::Test);
  OptimizerConfig config;
  config.kind = OptimizerKind::Adam;
  config.lr = 0.01;
  Optimizer optimizer(model->parameters(), config);
  Trainer trainer(*model, optimizer, kernels::Device::cpu(), spec.objective);
  data::DataLoader train_loader(*train, 128, data::Shuffle::Yes, 1, data::LastBatch::Drop);
  data::DataLoader test_loader(*test, 500, data::Shuffle::No, 0, data::LastBatch::Keep);

  const double auc_before = trainer.evaluate(test_loader).auc;
  double first_loss = 0, last_loss = 0;
  int steps = 0;
  train_loader.start_epoch(0);
  while (auto batch = train_loader.next()) {
    const double loss = trainer.train_step(*batch).loss;
    if (steps < 20) first_loss += loss / 20;
    if (steps >= 292) last_loss += loss / 20;
    if (++steps == 312) break;
  }
  const EvalResult after = trainer.evaluate(test_loader);
  const double best = test->true_auc();
  BOOST_TEST_MESSAGE("test AUC " << auc_before << " -> " << after.auc << " after " << steps << " steps (known achievable "
                                 << best << "); train loss " << first_loss << " -> " << last_loss);
  BOOST_TEST(after.auc > 0.68);
  BOOST_TEST(after.auc > auc_before + 0.05);
  BOOST_TEST(after.auc <= best + 0.02);
  BOOST_TEST(last_loss < first_loss);
}

BOOST_AUTO_TEST_SUITE_END()
