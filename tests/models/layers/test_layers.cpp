// Layer-level behaviour: split backward equals full backward, model-level gradient check,
// shape errors that name the layer.
#include <cmath>
#include <map>

#include <boost/test/unit_test.hpp>

#include "models/layers/batch_norm.h"
#include "models/layers/conv2d.h"
#include "models/layers/embedding.h"
#include "models/layers/linear.h"
#include "models/layers/sequential.h"
#include "models/layers/simple.h"
#include "models/loss.h"
#include "kernels/ops/elementwise.h"
#include "models/zoo/model_spec.h"
#include "tests/support/basic_block_reference.h"
#include "tests/support/test_util.h"

using namespace pw;
using namespace pw::models;
using kernels::Tensor;

namespace {

std::unique_ptr<Sequential> small_resnet(std::uint64_t seed) {  // whole model, for the split test
  ModelOptions o;
  o.width = 4;
  o.sample_shape = {2, 16, 16};
  o.num_classes = 5;
  auto spec = make_model_spec("resnet50", o);
  return build_model(spec, seed);
}

Tensor labels_for(std::int64_t n, int classes) {
  std::vector<std::int64_t> v;
  for (std::int64_t i = 0; i < n; ++i) v.push_back(i % classes);
  return Tensor::from_vector(v, {n});
}

double loss_of(Sequential& model, const Tensor& x, const Tensor& labels) {
  auto out = model.forward(x, Mode::Train);
  return softmax_cross_entropy(out.y, labels, 1.0).loss;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(layers)

BOOST_AUTO_TEST_CASE(split_backward_equals_full_backward) {
  auto a = small_resnet(7);
  auto b = small_resnet(7);
  const Tensor x = test::random_tensor({3, 2, 16, 16}, 11);
  const Tensor labels = labels_for(3, 5);

  auto out_a = a->forward(x, Mode::Train);
  auto loss_a = softmax_cross_entropy(out_a.y, labels, 1.0 / 3);
  const Tensor gx_full = a->backward(*out_a.ctx, loss_a.grad_logits);

  auto out_b = b->forward(x, Mode::Train);
  auto loss_b = softmax_cross_entropy(out_b.y, labels, 1.0 / 3);
  const Tensor gx_split = b->backward_input(*out_b.ctx, loss_b.grad_logits);
  for (auto& [name, p] : b->named_parameters()) {
    BOOST_TEST_CONTEXT(name) { BOOST_CHECK_EQUAL(kernels::sum_of_squares(p->grad), 0.0); }
  }
  b->backward_weight(*out_b.ctx);

  test::check_close(gx_split, gx_full, 1e-6, 1e-7, "input gradient");
  auto pa = a->named_parameters();
  auto pb = b->named_parameters();
  BOOST_REQUIRE_EQUAL(pa.size(), pb.size());
  for (std::size_t i = 0; i < pa.size(); ++i) test::check_close(pb[i].second->grad, pa[i].second->grad, 1e-6, 1e-7, pa[i].first);
}

// The first `blocks` top-level layers of a zoo ResNet, then pooling and a classifier.
std::unique_ptr<Sequential> resnet_prefix(const std::string& name, int layers, std::uint64_t seed) {
  ModelOptions o;
  o.width = 4;
  o.sample_shape = {2, 16, 16};
  const auto spec = make_model_spec(name, o);
  auto model = std::make_unique<Sequential>();
  kernels::Shape s = {8, 2, 16, 16};
  for (int i = 0; i < layers; ++i) {
    auto layer = spec.layers[static_cast<std::size_t>(i)].build();
    s = layer->output_shape(s);
    model->add(spec.layers[static_cast<std::size_t>(i)].name, std::move(layer));
  }
  model->add("avgpool", std::make_unique<AdaptiveAvgPool2d>(1, 1));
  model->add("flatten", std::make_unique<Flatten>());
  model->add("fc", std::make_unique<Linear>(static_cast<int>(s[1]), 5));
  model->initialize(seed);
  return model;
}

BOOST_AUTO_TEST_CASE(model_gradient_matches_finite_differences) {
  // End to end through conv, batch-norm, ReLU, basic and bottleneck residual blocks with
  // projection shortcuts, pooling and linear, in F32. The op-level checks run in F64; F32 finite
  // differences through deep random nets get noisy, so this uses the stem plus two blocks.
  for (const auto& [name, layers] : {std::pair<std::string, int>{"resnet18", 6}, {"resnet50", 5}}) {
    auto model = resnet_prefix(name, layers, 3);
    const Tensor x = test::random_tensor({8, 2, 16, 16}, 5);
    const Tensor labels = labels_for(8, 5);
    auto out = model->forward(x, Mode::Train);
    auto loss = softmax_cross_entropy(out.y, labels, 1.0 / 8);
    model->backward(*out.ctx, loss.grad_logits);

    int checked = 0;
    for (auto& [pname, p] : model->named_parameters()) {
      for (std::int64_t k = 0; k < 3; ++k) {
        const auto i = (k * 7919) % p->value.numel();
        auto* v = p->value.data<float>();
        const float keep = v[i];
        const double eps = 1e-3;
        v[i] = keep + static_cast<float>(eps);
        const double up = loss_of(*model, x, labels);
        v[i] = keep - static_cast<float>(eps);
        const double down = loss_of(*model, x, labels);
        v[i] = keep;
        const double numeric = (up - down) / (2 * eps);
        const double analytic = p->grad.data<float>()[i];
        BOOST_TEST_CONTEXT(name << " " << pname << "[" << i << "]") {
          BOOST_CHECK_SMALL(analytic - numeric, 1e-2 + 5e-2 * std::abs(numeric));
        }
        ++checked;
      }
    }
    BOOST_CHECK_GT(checked, 40);
  }
}

// resnet18's layer1.0 in F32 against the same block through the F64 op loops, on the activations
// and gradient the model hands it (tests/support/basic_block_reference.h). Of a million
// pre-activations a few lie within F32 rounding of zero, and which side they fall on depends on
// the CPU's kernels (AVX2 and AVX-512 round differently): one flipped ReLU moves a gradient by
// ~1e-3. So the ReLUs' decisions are checked on their own (the F32 pass's signs agree with F64's
// except at values within rounding of zero), and the F64 reference follows them.
BOOST_AUTO_TEST_CASE(basic_block_f32_matches_f64_on_model_activations) {
  auto c = test::resnet18_block_case();
  auto& block = c.model->at(c.block);
  std::map<std::string, Tensor> weights;
  for (auto& [name, p] : block.named_parameters()) weights[name] = p->value;
  const auto f32 = test::basic_block_pass(c.input, c.grad_output, weights);
  const auto own = test::basic_block_pass(c.input.to(kernels::DType::F64), c.grad_output.to(kernels::DType::F64), weights);
  for (const auto& [what, mine, theirs] : {std::tuple{"r1", &f32.b1, &own.b1}, std::tuple{"y", &f32.v, &own.v}}) {
    const auto flips = test::sign_flips(*mine, *theirs);
    BOOST_TEST_MESSAGE("ReLU " << what << ": " << flips.count << " decision(s) differ from F64, at |x| <= " << flips.largest);
    BOOST_TEST(flips.count <= 16);
    BOOST_TEST(flips.largest <= 1e-6 * test::largest_magnitude(*theirs));
  }
  const auto ref = test::basic_block_pass(c.input.to(kernels::DType::F64), c.grad_output.to(kernels::DType::F64), weights,
                                          nullptr, &f32);
  auto out = block.forward(c.input, Mode::Train);
  const Tensor gx = block.backward(*out.ctx, c.grad_output);
  BOOST_TEST_MESSAGE("layer1.0 input gradient: F32 against F64 " << test::relative_error(gx, ref.gx));
  BOOST_CHECK_LT(test::relative_error(out.y, ref.y), 1e-6);
  BOOST_CHECK_LT(test::relative_error(gx, ref.gx), 1e-5);
  for (auto& [name, p] : block.named_parameters()) {
    const double e = test::relative_error(p->grad, test::basic_block_grad(ref, name));
    BOOST_TEST_MESSAGE("layer1.0." << name << " gradient: F32 against F64 " << e);
    BOOST_CHECK_MESSAGE(e < 1e-5, "layer1.0." << name << " gradient: F32 against F64 " << e);
  }
}

BOOST_AUTO_TEST_CASE(wrong_input_shape_names_the_layer) {
  Conv2d conv(3, 8, 3);
  const Tensor x = Tensor::zeros({1, 4, 5, 5});
  try {
    conv.forward(x, Mode::Train);
    BOOST_FAIL("expected an error");
  } catch (const Error& e) {
    const std::string msg = e.what();
    BOOST_CHECK_MESSAGE(msg.find("Conv2d(3->8) expects [N, 3, H, W], got [1, 4, 5, 5]") != std::string::npos, msg);
  }
  Linear fc(10, 2);
  BOOST_CHECK_THROW(fc.forward(Tensor::zeros({2, 9}), Mode::Train), Error);
}

BOOST_AUTO_TEST_CASE(backward_twice_on_one_context_is_an_error) {
  Linear fc(3, 2);
  fc.initialize(1);
  auto out = fc.forward(test::random_tensor({2, 3}, 1), Mode::Train);
  fc.backward(*out.ctx, Tensor::full({2, 2}, 1.0));
  BOOST_CHECK_THROW(fc.backward(*out.ctx, Tensor::full({2, 2}, 1.0)), Error);
}

BOOST_AUTO_TEST_CASE(gradients_accumulate_over_micro_batches) {
  // Two half-batches with the gradient scaled by 1/4 each add up to the 4-sample batch gradient.
  Linear whole(3, 2), halves(3, 2);
  whole.initialize(9);
  halves.initialize(9);
  const Tensor x = test::random_tensor({4, 3}, 2);
  const Tensor labels = labels_for(4, 2);
  auto out = whole.forward(x, Mode::Train);
  whole.backward(*out.ctx, softmax_cross_entropy(out.y, labels, 0.25).grad_logits);
  const auto xs = x.to_float_vector();
  for (int h = 0; h < 2; ++h) {
    const Tensor xh = Tensor::from_vector(std::vector<float>(xs.begin() + h * 6, xs.begin() + h * 6 + 6), {2, 3});
    const Tensor lh = Tensor::from_vector(std::vector<std::int64_t>{0, 1}, {2});
    auto o = halves.forward(xh, Mode::Train);
    halves.backward(*o.ctx, softmax_cross_entropy(o.y, lh, 0.25).grad_logits);
  }
  for (std::size_t i = 0; i < 2; ++i)
    test::check_close(halves.parameters()[i]->grad, whole.parameters()[i]->grad, 1e-5, 1e-7, "accumulated grad");
}

BOOST_AUTO_TEST_CASE(embedding_layer_scatters_gradients_to_rows) {
  Embedding emb(5, 3);
  emb.initialize(4);
  const Tensor ids = Tensor::from_vector(std::vector<std::int64_t>{1, 3, 1}, {3});
  auto out = emb.forward(ids, Mode::Train);
  BOOST_CHECK(out.y.shape() == (kernels::Shape{3, 3}));
  emb.backward(*out.ctx, Tensor::full({3, 3}, 1.0));
  const auto g = emb.parameters()[0]->grad.to_double_vector();
  BOOST_CHECK_EQUAL(g[1 * 3], 2.0);
  BOOST_CHECK_EQUAL(g[3 * 3], 1.0);
  BOOST_CHECK_EQUAL(g[0], 0.0);
}

BOOST_AUTO_TEST_CASE(dropout_is_identity_in_eval_and_scales_in_train) {
  Dropout d(0.5, 3);
  const Tensor x = Tensor::full({1000}, 1.0);
  auto eval = d.forward(x, Mode::Eval);
  BOOST_CHECK_EQUAL(kernels::sum(eval.y), 1000.0);
  auto train = d.forward(x, Mode::Train);
  const auto v = train.y.to_double_vector();
  int kept = 0;
  for (double e : v) {
    BOOST_CHECK(e == 0.0 || e == 2.0);
    kept += e != 0.0;
  }
  BOOST_CHECK(kept > 400 && kept < 600);
}

BOOST_AUTO_TEST_SUITE_END()
