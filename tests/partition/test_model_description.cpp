// Model descriptions: split points and their errors, stages built alone, tied weights.
#include <map>

#include <boost/test/unit_test.hpp>

#include "models/layers/linear.h"
#include "models/layers/simple.h"
#include "partition/model_description.h"
#include "pipewright/layers.h"

using namespace pw;
using namespace pw::partition;

namespace {

models::ModelSpec resnet18(int width = 8) {
  models::ModelOptions o;
  o.width = width;
  o.sample_shape = {3, 16, 16};
  return models::make_model_spec("resnet18", o);
}

template <typename Fn>
void check_input_error(Fn fn, const std::string& expected) {
  try {
    fn();
    BOOST_ERROR("no InputError; expected: " << expected);
  } catch (const InputError& e) {
    BOOST_CHECK_MESSAGE(std::string(e.what()) == expected, "got:      " << e.what() << "\nexpected: " << expected);
  }
}

template <typename L, typename... Args>
models::LayerSpec spec(std::string name, Args... args) {
  return {std::move(name), [=] { return std::unique_ptr<models::Layer>(std::make_unique<L>(args...)); }};
}

ModelDescription tied_toy() {
  ModelDescription d;
  d.name = "toy";
  d.sample_shape = {1, 1, 8};
  d.num_classes = 8;
  d.layers = {spec<models::Flatten>("flatten"), spec<models::Linear>("fc_in", 8, 8), spec<models::ReLU>("relu"),
              spec<models::Linear>("fc_in.extra", 8, 8), spec<models::Linear>("fc_out", 8, 8)};
  d.tied = {{"embedding", {"fc_in.weight", "fc_out.weight"}}};
  return d;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(model_description)

BOOST_AUTO_TEST_CASE(describe_keeps_the_zoo_layers) {
  const auto spec = resnet18();
  const auto d = describe(spec);
  BOOST_CHECK_EQUAL(d.name, "resnet18");
  BOOST_CHECK_EQUAL(d.layer_count(), 14);   // conv1 bn1 relu, 8 blocks, avgpool flatten fc
  BOOST_CHECK_EQUAL(d.layers.front().name, "conv1");
  BOOST_CHECK_EQUAL(d.layers.back().name, "fc");
  BOOST_CHECK(d.split_points.empty());
  BOOST_CHECK(d.tied.empty());
  BOOST_CHECK(explicit_partition(d) == (Partition{{0, 14}}));
}

BOOST_AUTO_TEST_CASE(split_at_builds_contiguous_stages) {
  BOOST_CHECK(split_at(14, {}) == (Partition{{0, 14}}));
  BOOST_CHECK(split_at(14, {3, 7, 12}) == (Partition{{0, 3}, {3, 7}, {7, 12}, {12, 14}}));
  BOOST_CHECK(split_at(3, {1, 2}) == (Partition{{0, 1}, {1, 2}, {2, 3}}));
}

BOOST_AUTO_TEST_CASE(split_at_rejects_bad_points_with_one_line) {
  const SplitLabels labels{"--split", "resnet18"};
  const std::string rule = ": split points must be strictly increasing layer indices in 1..13 (resnet18 has 14 layers)";
  check_input_error([&] { split_at(14, {7, 3}, labels); }, "--split 7,3" + rule);
  check_input_error([&] { split_at(14, {3, 3}, labels); }, "--split 3,3" + rule);
  check_input_error([&] { split_at(14, {0, 5}, labels); }, "--split 0,5" + rule);
  check_input_error([&] { split_at(14, {5, 14}, labels); }, "--split 5,14" + rule);
  check_input_error([&] { split_at(14, {-2}, labels); }, "--split -2" + rule);
  check_input_error([&] { split_at(3, {1, 2, 3}, {"--split", "tiny"}); },
                    "--split 1,2,3: 4 stages but tiny has only 3 layers; give at most 2 split points");
  check_input_error([&] { split_at(14, {20}); },
                    "split 20: split points must be strictly increasing layer indices in 1..13 (the model has 14 layers)");
}

BOOST_AUTO_TEST_CASE(parse_split_points_reads_comma_separated_indices) {
  BOOST_CHECK(parse_split_points("3,7,12") == (std::vector<int>{3, 7, 12}));
  BOOST_CHECK(parse_split_points("5") == (std::vector<int>{5}));
  BOOST_CHECK_EQUAL(format_split_points({3, 7, 12}), "3,7,12");
  for (const char* bad : {"", "3,,7", "3,x", "3.5", "3,", ",3", "3 7", "99999999999"}) {
    check_input_error([&] { parse_split_points(bad); },
                      "bad split points '" + std::string(bad) + "'; expected comma-separated layer indices, e.g. 3,7,12");
  }
}

BOOST_AUTO_TEST_CASE(stage_count_must_be_between_one_and_the_layer_count) {
  check_stage_count(14, 1, "resnet18");
  check_stage_count(14, 14, "resnet18");
  check_input_error([] { check_stage_count(14, 0, "resnet18"); }, "0 stages; need at least 1");
  check_input_error([] { check_stage_count(14, 15, "resnet18"); },
                    "15 stages: resnet18 has only 14 layers, so at most 14 stages");
}

BOOST_AUTO_TEST_CASE(stages_built_alone_have_the_whole_models_weights) {
  const auto spec = resnet18();
  const auto d = describe(spec);
  const std::uint64_t seed = 7;
  auto whole = models::build_model(spec, seed);
  std::map<std::string, std::vector<float>> expected;
  for (const auto& [name, p] : whole->named_parameters()) expected[name] = p->value.to_float_vector();
  std::map<std::string, std::vector<float>> expected_buffers;
  for (const auto& [name, b] : whole->named_buffers()) expected_buffers[name] = b->value.to_float_vector();

  std::size_t seen = 0, seen_buffers = 0;
  for (const auto& range : split_at(d.layer_count(), {2, 6, 11})) {
    auto stage = build_stage(d, range, seed);
    BOOST_CHECK_EQUAL(stage->size(), static_cast<std::size_t>(range.size()));
    for (const auto& [name, p] : stage->named_parameters()) {
      BOOST_REQUIRE_MESSAGE(expected.count(name) == 1, "stage parameter " << name << " not in the whole model");
      BOOST_CHECK_MESSAGE(p->value.to_float_vector() == expected[name], name << " differs from the whole model's");
      ++seen;
    }
    for (const auto& [name, b] : stage->named_buffers()) {
      BOOST_REQUIRE(expected_buffers.count(name) == 1);
      BOOST_CHECK_MESSAGE(b->value.to_float_vector() == expected_buffers[name], name);
      ++seen_buffers;
    }
  }
  BOOST_CHECK_EQUAL(seen, expected.size());
  BOOST_CHECK_EQUAL(seen_buffers, expected_buffers.size());
  BOOST_CHECK(expected.count("layer2.0.downsample.0.weight") == 1);
}

BOOST_AUTO_TEST_CASE(tied_weights_are_located_by_the_longest_layer_name) {
  const auto d = tied_toy();
  BOOST_CHECK_EQUAL(owning_layer(d, "fc_in.weight"), 1);
  BOOST_CHECK_EQUAL(owning_layer(d, "fc_in.extra.weight"), 3);
  BOOST_CHECK_EQUAL(owning_layer(d, "fc_out.bias"), 4);
  check_tied(d);
  BOOST_CHECK(tied_stages(d, split_at(5, {2}), d.tied.front()) == (std::vector<int>{0, 1}));
  BOOST_CHECK(tied_stages(d, split_at(5, {}), d.tied.front()) == (std::vector<int>{0, 0}));
  BOOST_CHECK_EQUAL(stage_of_layer(split_at(5, {2, 4}), 4), 2);
}

BOOST_AUTO_TEST_CASE(bad_tied_weights_are_input_errors) {
  auto d = tied_toy();
  d.tied = {{"t", {"fc_in.weight"}}};
  check_input_error([&] { check_tied(d); }, "tied weight 't' names 1 parameter(s); a tie needs at least 2");
  d.tied = {{"t", {"fc_in.weight", "fc9.weight"}}};
  check_input_error([&] { check_tied(d); },
                    "tied parameter 'fc9.weight' belongs to no layer of toy; expected <layer name>.<parameter>, e.g. flatten.weight");
  d.tied = {{"t", {"fc_in.weight", "relu.weight"}}};
  check_input_error([&] { check_tied(d); }, "tied weight 't': layer relu has no parameter 'relu.weight'");
  d.tied = {{"t", {"fc_in.weight", "fc_out.bias"}}};
  check_input_error([&] { check_tied(d); }, "tied weight 't': fc_out.bias is [8] but fc_in.weight is [8, 8]");
}

// The public helpers a program describes its model with (pipewright/model.h, layers.h).
BOOST_AUTO_TEST_CASE(a_program_splits_its_model_by_layer_names) {
  ModelDescription m;
  m.name = "mine";
  m.sample_shape = {1, 8, 8};
  m.num_classes = 4;
  m.layers = {layers::conv2d("conv1", 1, 4, 3, 1, 1), layers::relu("relu1"), layers::flatten("flatten"),
              layers::linear("fc1", 4 * 8 * 8, 16), layers::relu("relu2"), layers::linear("fc2", 16, 4)};
  BOOST_TEST(layer_index(m, "fc1") == 3);
  BOOST_TEST(split_before(m, {"flatten", "fc2"}) == std::vector<int>({2, 5}));
  check_input_error([&] { split_before(m, {"fc3"}); },
                    "no layer named 'fc3' in mine; its layers are conv1, relu1, flatten, fc1, relu2, fc2");
  check_input_error([&] { split_before(m, {"conv1"}); },
                    "split before 'conv1': it is the first layer of mine, which starts stage 0 already; name the "
                    "first layer of stages 1..P-1");
  check_input_error([&] { split_before(m, {"fc2", "fc1"}); },
                    "split before 'fc1': it does not come after 'fc2' in mine; name the stages' first layers in the "
                    "model's order");
  // The stages built from a name split hold the whole model's parameters under the same names.
  m.split_points = split_before(m, {"fc1"});
  const auto stages = explicit_partition(m);
  BOOST_REQUIRE(stages.size() == 2u);
  auto first = build_stage(m, stages[0], 1);
  auto second = build_stage(m, stages[1], 1);
  BOOST_TEST(first->parameters().size() == 2u);    // conv1 weight and bias
  BOOST_TEST(second->parameters().size() == 4u);   // fc1, fc2
  BOOST_TEST(second->output_shape({2, 4 * 8 * 8}) == kernels::Shape({2, 4}));
}

BOOST_AUTO_TEST_CASE(layer_factories_build_the_layers_they_name_and_refuse_bad_sizes) {
  const std::vector<std::pair<layers::LayerSpec, kernels::Shape>> cases = {
      {layers::conv2d("c", 3, 8, 3, 2, 1, models::Bias::No), {2, 8, 4, 4}},
      {layers::batch_norm2d("bn", 3), {2, 3, 8, 8}},
      {layers::relu("r"), {2, 3, 8, 8}},
      {layers::max_pool2d("mp", 2, 2), {2, 3, 4, 4}},
      {layers::avg_pool2d("ap", 2, 2), {2, 3, 4, 4}},
      {layers::adaptive_avg_pool2d("aap", 1, 1), {2, 3, 1, 1}},
      {layers::flatten("f"), {2, 3 * 8 * 8}},
      {layers::dropout("d", 0.5), {2, 3, 8, 8}},
      {layers::basic_block("b", 3, 8, 2), {2, 8, 4, 4}},
      {layers::bottleneck_block("bb", 3, 2, 1), {2, 8, 8, 8}},
  };
  for (const auto& [spec, expected] : cases) {
    const auto layer = spec.build();
    BOOST_TEST(layer->output_shape({2, 3, 8, 8}) == expected, spec.name);
  }
  BOOST_TEST(layers::linear("fc", 6, 5).build()->output_shape({4, 6}) == kernels::Shape({4, 5}));
  BOOST_TEST(layers::embedding("e", 100, 7).build()->output_shape({4}) == kernels::Shape({4, 7}));
  check_input_error([] { layers::conv2d("c", 3, 0, 3); }, "layer 'c': out_channels 0; must be > 0");
  check_input_error([] { layers::linear("", 3, 4); }, "a layer needs a name (it prefixes its parameters' names)");
  check_input_error([] { layers::dropout("d", 1.0); }, "layer 'd': dropout probability 1; must be in [0, 1)");
  check_input_error([] { layers::batch_norm2d("bn", 4, 2.0); }, "layer 'bn': momentum 2; must be in [0, 1]");
}

BOOST_AUTO_TEST_CASE(a_zoo_model_is_described_for_a_program_to_split) {
  ZooOptions o;
  o.width = 8;
  o.sample_shape = {3, 16, 16};
  const auto m = describe_zoo_model("resnet18", o);
  BOOST_TEST(m.name == "resnet18");
  BOOST_TEST(m.layers.size() == resnet18().layers.size());
  BOOST_TEST(layer_index(m, "layer3.0") > layer_index(m, "layer2.0"));
  BOOST_CHECK_THROW(describe_zoo_model("resnet19"), InputError);
}

BOOST_AUTO_TEST_SUITE_END()
