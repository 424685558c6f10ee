// The model zoo: parameter counts against torchvision's, names, shapes, bad names.
#include <set>

#include <boost/test/unit_test.hpp>

#include "models/zoo/model_spec.h"
#include "tests/support/test_util.h"

using namespace pw;
using namespace pw::models;

namespace {
ModelOptions imagenet() {
  ModelOptions o;
  o.sample_shape = {3, 224, 224};
  o.num_classes = 1000;
  return o;
}
ModelOptions small(int width) {
  ModelOptions o;
  o.width = width;
  return o;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(zoo)

// Reference counts: sum(p.numel() for p in torchvision.models.<name>().parameters()).
BOOST_AUTO_TEST_CASE(imagenet_parameter_counts_match_torchvision) {
  const std::vector<std::pair<std::string, std::int64_t>> expected = {
      {"resnet18", 11689512}, {"resnet34", 21797672}, {"resnet50", 25557032}, {"resnet101", 44549160},
      {"resnet152", 60192808}, {"vgg16", 138357544}};
  for (const auto& [name, count] : expected) {
    BOOST_TEST_CONTEXT(name) { BOOST_CHECK_EQUAL(model_stats(make_model_spec(name, imagenet())).parameters, count); }
  }
}

BOOST_AUTO_TEST_CASE(seed_cnn_matches_the_keras_example) {
  const auto stats = model_stats(make_model_spec("seed-cnn", small(64)));
  // conv 32*1*3*3+32, dense 5408*64+64, dense 64*10+10
  BOOST_CHECK_EQUAL(stats.parameters, 320 + 346176 + 650);
  // conv 32x26x26, relu, pool 32x13x13, flatten (a view), 64, 64, 10 floats
  BOOST_CHECK_EQUAL(stats.activation_bytes_per_sample, (21632 * 2 + 5408 + 64 + 64 + 10) * 4);
}

BOOST_AUTO_TEST_CASE(parameter_names_follow_torchvision) {
  auto model = build_model(make_model_spec("resnet18", small(8)), 1);
  std::set<std::string> names;
  for (auto& [n, p] : model->named_parameters()) names.insert(n);
  for (auto& [n, b] : model->named_buffers()) names.insert(n);
  for (const char* want : {"conv1.weight", "bn1.weight", "bn1.running_mean", "layer1.0.conv1.weight",
                           "layer1.1.bn2.bias", "layer2.0.downsample.0.weight", "layer2.0.downsample.1.running_var",
                           "layer4.1.conv2.weight", "fc.weight", "fc.bias"}) {
    BOOST_CHECK_MESSAGE(names.count(want) == 1, "missing " << want);
  }
  BOOST_CHECK_EQUAL(names.count("layer1.0.downsample.0.weight"), 0u);
}

BOOST_AUTO_TEST_CASE(small_forms_produce_logits) {
  const kernels::Tensor x = test::random_tensor({2, 1, 28, 28}, 3);
  for (const char* name : {"seed-cnn", "resnet18", "resnet34", "resnet50", "vgg16"}) {
    BOOST_TEST_CONTEXT(name) {
      auto model = build_model(make_model_spec(name, small(4)), 1);
      auto out = model->forward(x, Mode::Eval);
      BOOST_CHECK(out.y.shape() == (kernels::Shape{2, 10}));
      for (double v : out.y.to_double_vector()) BOOST_CHECK(std::isfinite(v));
    }
  }
}

// Real image sets come in every size: each ResNet and vgg16 takes 3xHxW from 32 up, square or
// not, odd or even (inputs above 64x64 get the ImageNet form).
BOOST_AUTO_TEST_CASE(image_models_take_any_size_from_32) {
  const std::vector<kernels::Shape> shapes = {{3, 32, 32}, {3, 33, 47}, {3, 65, 65}, {3, 100, 150}, {3, 224, 224}};
  for (const char* name : {"resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "vgg16"}) {
    for (const auto& shape : shapes) {
      BOOST_TEST_CONTEXT(name << " " << kernels::shape_str(shape)) {
        ModelOptions o;
        o.width = 2;
        o.sample_shape = shape;
        o.num_classes = 7;
        const auto spec = make_model_spec(name, o);
        kernels::Shape s = {1, shape[0], shape[1], shape[2]};
        for (const auto& layer : spec.layers) s = layer.build()->output_shape(s);
        BOOST_CHECK(s == (kernels::Shape{1, 7}));
      }
    }
  }
  // One forward pass end to end at an odd size.
  ModelOptions o;
  o.width = 2;
  o.sample_shape = {3, 67, 45};
  auto model = build_model(make_model_spec("resnet50", o), 1);
  const auto out = model->forward(test::random_tensor({2, 3, 67, 45}, 4), Mode::Eval);
  BOOST_CHECK(out.y.shape() == (kernels::Shape{2, 10}));
}

BOOST_AUTO_TEST_CASE(too_small_an_input_is_a_one_line_error) {
  ModelOptions o;
  o.width = 2;
  o.sample_shape = {3, 8, 8};
  try {
    make_model_spec("vgg16", o);
    BOOST_FAIL("vgg16 took 3x8x8");
  } catch (const InputError& e) {
    const std::string what = e.what();
    BOOST_TEST_MESSAGE(what);
    BOOST_CHECK(what.find("at least 16x16") != std::string::npos);
    BOOST_CHECK(what.find("3x8x8") != std::string::npos || what.find("[3, 8, 8]") != std::string::npos);
    BOOST_CHECK(what.find('\n') == std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(same_seed_same_weights_and_layers_build_alone_identically) {
  const auto spec = make_model_spec("resnet18", small(4));
  auto a = build_model(spec, 42);
  auto b = build_model(spec, 42);
  auto c = build_model(spec, 43);
  const auto pa = a->named_parameters();
  const auto pb = b->named_parameters();
  const auto pc = c->named_parameters();
  BOOST_CHECK(pa[0].second->value.to_double_vector() == pb[0].second->value.to_double_vector());
  BOOST_CHECK(pa[0].second->value.to_double_vector() != pc[0].second->value.to_double_vector());
  // A stage that builds only layer3.0 draws the same weights as the whole model.
  for (const auto& layer : spec.layers) {
    if (layer.name != "layer3.0") continue;
    auto alone = layer.build();
    alone->initialize(42, "layer3.0.");
    for (auto& [n, p] : alone->named_parameters("layer3.0.")) {
      for (auto& [m, q] : pa)
        if (m == n) BOOST_CHECK(p->value.to_double_vector() == q->value.to_double_vector());
    }
  }
}

BOOST_AUTO_TEST_CASE(unknown_model_lists_the_accepted_names) {
  try {
    make_model_spec("resnet19", small(8));
    BOOST_FAIL("expected InputError");
  } catch (const InputError& e) {
    BOOST_CHECK_EQUAL(std::string(e.what()),
                      "unknown model 'resnet19'; accepted: seed-cnn, resnet18, resnet34, resnet50, resnet101, resnet152, vgg16, dlrm");
  }
  ModelOptions bad = small(8);
  bad.width = 0;
  BOOST_CHECK_THROW(make_model_spec("resnet18", bad), InputError);
}

BOOST_AUTO_TEST_SUITE_END()
