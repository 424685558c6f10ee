// Post-validation's undo (pipeline/optimistic_update.h): an update made before the verdict and
// undone leaves parameters, optimizer state, step count and gradients bitwise as they were, and a
// redo with another gradient scale (clipping) gives bitwise what a stage that waited makes.
#include <boost/test/unit_test.hpp>

#include <cstring>
#include <random>

#include "models/layers/linear.h"
#include "models/optimizer.h"
#include "pipeline/optimistic_update.h"

using namespace pw;
using kernels::Tensor;

namespace {

// Two linear layers with seeded weights and gradients; `steps` updates already made, so the
// optimizer's state is not zero.
struct Stage {
  models::Linear a{6, 5}, b{5, 3};
  std::unique_ptr<models::Optimizer> optimizer;
  std::vector<models::Parameter*> params;

  Stage(models::OptimizerKind kind, int steps) {
    a.initialize(3, "a");
    b.initialize(4, "b");
    for (auto* layer : {&a, &b})
      for (auto* p : layer->parameters()) params.push_back(p);
    models::OptimizerConfig c;
    c.kind = kind;
    c.lr = 0.1;
    c.momentum = 0.9;
    c.weight_decay = 0.01;
    optimizer = std::make_unique<models::Optimizer>(params, c);
    for (int s = 0; s < steps; ++s) {
      set_gradients(100 + static_cast<unsigned>(s));
      optimizer->step();
    }
    set_gradients(7);
  }

  void set_gradients(unsigned seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (auto* p : params) {
      std::vector<float> g(static_cast<std::size_t>(p->grad.numel()));
      for (auto& x : g) x = normal(rng);
      p->grad.copy_from(Tensor::from_vector(g, p->grad.shape()));
    }
  }

  // Every value, state tensor and gradient as raw floats, with the step count: what must come back.
  std::vector<std::vector<float>> everything() {
    std::vector<std::vector<float>> out;
    std::vector<std::pair<std::string, models::Parameter*>> named;
    for (std::size_t i = 0; i < params.size(); ++i) {
      named.emplace_back("p" + std::to_string(i), params[i]);
      out.push_back(params[i]->value.to_float_vector());
      out.push_back(params[i]->grad.to_float_vector());
    }
    for (const auto& [name, t] : optimizer->named_state(named)) out.push_back(t->to_float_vector());
    out.push_back({static_cast<float>(optimizer->steps())});
    return out;
  }
};

// Bitwise: floats compared by their bits (a NaN equals itself).
bool same_bits(const std::vector<std::vector<float>>& x, const std::vector<std::vector<float>>& y) {
  if (x.size() != y.size()) return false;
  for (std::size_t i = 0; i < x.size(); ++i)
    if (x[i].size() != y[i].size() || std::memcmp(x[i].data(), y[i].data(), x[i].size() * sizeof(float)) != 0)
      return false;
  return true;
}

const models::OptimizerKind kKinds[] = {models::OptimizerKind::Sgd, models::OptimizerKind::Adam,
                                        models::OptimizerKind::Adagrad};

}  // namespace

BOOST_AUTO_TEST_SUITE(optimistic_update)

BOOST_AUTO_TEST_CASE(an_undone_update_restores_parameters_state_and_step_count_bitwise) {
  for (const auto kind : kKinds) {
    BOOST_TEST_CONTEXT(enum_name(kind)) {
      for (const double scale : {1.0, 1.0 / 1024.0}) {   // without and with an fp16 loss scale to divide out
        BOOST_TEST_CONTEXT("gradient scale " << scale) {
          Stage stage(kind, 2);
          const auto before = stage.everything();
          pipeline::OptimisticUpdate update;
          update.apply(*stage.optimizer, stage.params, scale);
          BOOST_TEST(update.pending());
          // The update did change what it must undo (else this test could not fail).
          BOOST_TEST(!same_bits(stage.everything(), before));
          BOOST_TEST(stage.optimizer->steps() == 3);
          update.undo(*stage.optimizer, stage.params);
          BOOST_TEST(!update.pending());
          BOOST_TEST(same_bits(stage.everything(), before));
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(a_redo_after_an_undo_equals_the_update_of_a_stage_that_waited) {
  // The clipping case: provisional scale 1 (or 1/loss scale), verdict another.
  for (const auto kind : kKinds) {
    for (const double provisional : {1.0, 1.0 / 1024.0}) {
      BOOST_TEST_CONTEXT(enum_name(kind) << ", provisional scale " << provisional) {
        const double clipped = 0.37 * provisional;
        Stage waited(kind, 2);
        pipeline::update_dense(*waited.optimizer, waited.params, clipped);
        Stage eager(kind, 2);
        pipeline::OptimisticUpdate update;
        update.apply(*eager.optimizer, eager.params, provisional);
        update.undo(*eager.optimizer, eager.params);
        pipeline::update_dense(*eager.optimizer, eager.params, clipped);
        BOOST_TEST(same_bits(eager.everything(), waited.everything()));
        // Without the undo the two updates compound: the comparison above would fail.
        Stage compounded(kind, 2);
        pipeline::update_dense(*compounded.optimizer, compounded.params, provisional);
        pipeline::update_dense(*compounded.optimizer, compounded.params, clipped / provisional);
        BOOST_TEST(!same_bits(compounded.everything(), waited.everything()));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(a_kept_update_is_the_update_of_a_stage_that_waited) {
  for (const auto kind : kKinds) {
    BOOST_TEST_CONTEXT(enum_name(kind)) {
      Stage waited(kind, 1);
      pipeline::update_dense(*waited.optimizer, waited.params, 1.0 / 256.0);
      Stage eager(kind, 1);
      pipeline::OptimisticUpdate update;
      update.apply(*eager.optimizer, eager.params, 1.0 / 256.0);
      update.keep();
      BOOST_TEST(!update.pending());
      BOOST_TEST(same_bits(eager.everything(), waited.everything()));
    }
  }
}

BOOST_AUTO_TEST_CASE(an_update_applied_twice_without_keep_or_undo_is_an_error) {
  Stage stage(models::OptimizerKind::Sgd, 0);
  pipeline::OptimisticUpdate update;
  update.apply(*stage.optimizer, stage.params, 1.0);
  BOOST_CHECK_THROW(update.apply(*stage.optimizer, stage.params, 1.0), std::exception);
}

BOOST_AUTO_TEST_SUITE_END()
