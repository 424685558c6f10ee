// The layer profiler on the seed CNN: shapes chained through the layers, positive times, boundary
// activation and parameter bytes, and what the Contexts keep.
#include <boost/test/unit_test.hpp>

#include "kernels/runtime.h"
#include "partition/profiler.h"

using namespace pw;
using namespace pw::partition;

namespace {
ModelDescription seed_cnn() {
  models::ModelOptions o;
  o.sample_shape = {1, 28, 28};
  return describe(models::make_model_spec("seed-cnn", o));
}
}  // namespace

BOOST_AUTO_TEST_SUITE(profiler)

BOOST_AUTO_TEST_CASE(layer_shapes_chain_output_shapes) {
  const auto shapes = layer_shapes(seed_cnn(), 4);
  BOOST_REQUIRE_EQUAL(shapes.size(), 8u);
  BOOST_CHECK(shapes[0] == (kernels::Shape{4, 1, 28, 28}));
  BOOST_CHECK(shapes[1] == (kernels::Shape{4, 32, 26, 26}));
  BOOST_CHECK(shapes[3] == (kernels::Shape{4, 32, 13, 13}));
  BOOST_CHECK(shapes[4] == (kernels::Shape{4, 32 * 13 * 13}));
  BOOST_CHECK(shapes[7] == (kernels::Shape{4, 10}));
  BOOST_CHECK_THROW(layer_shapes(seed_cnn(), 0), InputError);
}

BOOST_AUTO_TEST_CASE(seed_cnn_profile_has_times_bytes_and_stashes) {
  const auto device = kernels::Device::cpu();
  kernels::DeviceRuntime::get(device).set_threads(2);
  const std::int64_t mb = 8;
  const auto profiles = profile_layers(seed_cnn(), device, mb, 2);
  BOOST_REQUIRE_EQUAL(profiles.size(), 7u);
  const std::vector<std::string> names = {"conv1", "relu1", "pool1", "flatten", "fc1", "relu2", "fc2"};
  const std::vector<std::int64_t> outputs = {mb * 32 * 26 * 26, mb * 32 * 26 * 26, mb * 32 * 13 * 13, mb * 32 * 13 * 13,
                                             mb * 64, mb * 64, mb * 10};
  const std::vector<std::int64_t> params = {32 * 9 + 32, 0, 0, 0, 32 * 13 * 13 * 64 + 64, 0, 64 * 10 + 10};
  std::int64_t input = mb * 28 * 28;
  for (std::size_t i = 0; i < profiles.size(); ++i) {
    const auto& p = profiles[i];
    BOOST_TEST_CONTEXT(p.name) {
      BOOST_CHECK_EQUAL(p.name, names[i]);
      BOOST_CHECK_GT(p.forward_seconds, 0.0);
      BOOST_CHECK_GT(p.backward_seconds, 0.0);
      BOOST_CHECK_EQUAL(p.output_bytes, outputs[i] * 4);
      BOOST_CHECK_EQUAL(kernels::shape_numel(p.output_shape), outputs[i]);
      BOOST_CHECK_EQUAL(p.input_bytes, input * 4);
      BOOST_CHECK_EQUAL(p.parameters, params[i]);
      BOOST_CHECK_EQUAL(p.param_bytes, params[i] * 4);
      BOOST_CHECK_EQUAL(p.buffer_bytes, 0);
      BOOST_CHECK_GE(p.stash_bytes, 0);
      BOOST_CHECK_GE(p.workspace_bytes, 0);
    }
    input = outputs[i];
  }
  // Layers that need their input (or output) for backward keep at least one activation.
  BOOST_CHECK_GE(profiles[0].stash_bytes, mb * 28 * 28 * 4);        // conv1 keeps its input
  BOOST_CHECK_GE(profiles[1].stash_bytes, mb * 32 * 26 * 26 * 4);   // ReLU keeps input or output
  BOOST_CHECK_GE(profiles[4].stash_bytes, mb * 32 * 13 * 13 * 4);   // fc1 keeps its input
  // Nothing stays allocated after the profiler is done with a layer.
  BOOST_CHECK_EQUAL(kernels::DeviceRuntime::get(device).allocator().stats().in_use, 0);
}

BOOST_AUTO_TEST_CASE(batch_norm_buffers_are_counted) {
  models::ModelOptions o;
  o.width = 4;
  o.sample_shape = {3, 8, 8};
  const auto profiles = profile_layers(describe(models::make_model_spec("resnet18", o)), kernels::Device::cpu(), 2, 1);
  BOOST_CHECK_EQUAL(profiles[1].name, "bn1");
  BOOST_CHECK_EQUAL(profiles[1].param_bytes, 2 * 4 * 4);
  BOOST_CHECK_GT(profiles[1].buffer_bytes, 0);
}

BOOST_AUTO_TEST_SUITE_END()
