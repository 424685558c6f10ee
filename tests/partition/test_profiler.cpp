// The layer profiler on the seed CNN: shapes chained through the layers, positive times, boundary
// activation and parameter bytes, and what the Contexts keep.
#include <cmath>

#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cstdlib>
#include <limits>

#include "kernels/runtime.h"
#include "partition/cost_model.h"
#include "partition/profiler.h"
#include "partition/selective_recompute.h"

using namespace pw;
using namespace pw::partition;

namespace {
ModelDescription seed_cnn() {
  models::ModelOptions o;
  o.sample_shape = {1, 28, 28};
  return describe(models::make_model_spec("seed-cnn", o));
}

struct Kept {
  std::int64_t stash = 0;         // after the forwards
  std::int64_t weight_half = 0;   // after the input halves of the backwards
  std::int64_t input_half_peak = 0;   // while they run
};

// What a run of layers [begin, end) really keeps for backward, and from a split backward's input
// half until its weight half: the layers chained as a stage chains them, every Context kept, our
// own references (the input, the activations and gradients between the layers) dropped.
// With the input held elsewhere (the first piece's is the data loader's batch), it is allocated
// before the count starts: what the layers keep of it (or of a reshape of it) costs nothing.
Kept measured_kept(const ModelDescription& model, std::int64_t micro_batch, int begin, int end,
                   PieceInput input = PieceInput::Received) {
  const auto device = kernels::Device::cpu();
  auto& allocator = kernels::DeviceRuntime::get(device).allocator();
  const auto shapes = layer_shapes(model, micro_batch);
  std::vector<std::unique_ptr<models::Layer>> layers;
  for (int i = begin; i < end; ++i) {
    layers.push_back(model.layers[static_cast<std::size_t>(i)].build());
    layers.back()->initialize(1, "");
  }
  kernels::Tensor held_elsewhere;
  if (input == PieceInput::HeldElsewhere)
    held_elsewhere = kernels::Tensor::zeros(shapes[static_cast<std::size_t>(begin)], kernels::DType::F32, device);
  allocator.release_cache();
  const std::int64_t start = allocator.stats().in_use;
  std::vector<std::unique_ptr<models::Context>> contexts;
  {
    kernels::Tensor x = held_elsewhere.defined()
                            ? held_elsewhere
                            : kernels::Tensor::zeros(shapes[static_cast<std::size_t>(begin)], kernels::DType::F32, device);
    for (auto& layer : layers) {
      // Each layer from an empty cache, as profiled: a freed temporary of the layer before, reused
      // for a smaller request, would count whole (the allocator's slack, which this is not about).
      allocator.release_cache();
      auto out = layer->forward(x, models::Mode::Train);
      contexts.push_back(std::move(out.ctx));
      x = out.y;
    }
  }
  Kept kept;
  kept.stash = allocator.stats().in_use - start;
  {
    kernels::Tensor g = kernels::Tensor::zeros(shapes[static_cast<std::size_t>(end)], kernels::DType::F32, device);
    for (int i = end - begin; i-- > 0;) {
      allocator.release_cache();
      allocator.reset_peak();
      g = layers[static_cast<std::size_t>(i)]->backward_input(*contexts[static_cast<std::size_t>(i)], g);
      kept.input_half_peak = std::max(kept.input_half_peak, allocator.stats().peak_in_use - start);
    }
  }
  kept.weight_half = allocator.stats().in_use - start;
  for (std::size_t i = 0; i < layers.size(); ++i) layers[i]->backward_weight(*contexts[i]);
  return kept;
}
// Options that profile the seed CNN at micro-batch 2 with `repeats` timed passes.
ProfileOptions small_options(int repeats) {
  ProfileOptions options;
  options.micro_batch_size = 2;
  options.repeats = repeats;
  return options;
}

// Every layer of `profiles` has a forward and a backward time.
void check_every_layer_timed(const std::vector<LayerProfile>& profiles) {
  for (const auto& p : profiles) {
    BOOST_TEST_CONTEXT(p.name) {
      BOOST_TEST(p.forward_seconds > 0.0);
      BOOST_TEST(p.backward_seconds > 0.0);
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(profiler)

// A layer that keeps its output hands it to the next layer, which may keep it as its input: one
// tensor in two stashes. A piece's predicted stash counts it once, and equals what the chained
// layers keep, for every run of layers of the seed CNN and of a small ResNet (blocks keep their
// input for the shortcut, ReLUs their output). So does what they keep from the input half of a
// split backward until its weight half (every parameterised layer its output gradient, a
// convolution its input; more than the stash in a ResNet block), and the most it holds while the
// input halves run, from the profiled layers' own peaks. The piece is not the first: that
// one's input is a view of the data loader's batch, which its estimates leave out.
BOOST_AUTO_TEST_CASE(a_pieces_stash_counts_a_tensor_two_layers_keep_once) {
  models::ModelOptions o;
  o.width = 4;
  o.sample_shape = {3, 16, 16};
  const std::int64_t mb = 4;
  int shared_boundaries = 0, heavier_weight_halves = 0;
  for (const auto& model : {seed_cnn(), describe(models::make_model_spec("resnet18", o))}) {
    const auto profiles = profile_layers(model, kernels::Device::cpu(), mb, 1);
    const int n = static_cast<int>(profiles.size());
    for (int i = 0; i < n; ++i) {
      const auto& p = profiles[static_cast<std::size_t>(i)];
      BOOST_TEST_CONTEXT(model.name << " " << p.name) {
        BOOST_TEST((p.kept_input_bytes == 0 || p.kept_input_bytes >= p.input_bytes));
        BOOST_TEST((p.kept_output_bytes == 0 || p.kept_output_bytes >= p.output_bytes));
        BOOST_TEST(p.kept_input_bytes + p.kept_output_bytes <= p.stash_bytes);
      }
      if (i > 0 && p.kept_input_bytes > 0 && profiles[static_cast<std::size_t>(i) - 1].kept_output_bytes > 0) ++shared_boundaries;
    }
    CostModel cost;
    cost.stages = 2;
    for (int begin = 0; begin < n; ++begin)
      for (int end = begin + 1; end <= n; ++end) {
        BOOST_TEST_CONTEXT(model.name << " layers [" << begin << ", " << end << ")") {
          const auto estimate = estimate_piece(profiles, cost, 1, {begin, end});
          const auto measured = measured_kept(model, mb, begin, end);
          BOOST_TEST(estimate.stash_bytes == measured.stash);
          BOOST_TEST(estimate.weight_half_bytes == measured.weight_half);
          // Within one tensor: where a layer lets go of its kept output during its input half while
          // the next layer keeps it for its weight half, the profile does not say whether the
          // layer's own peak came before or after (a ReLU's comes before, a block's after).
          std::int64_t kept_output = 0;
          for (int i = begin; i < end; ++i)
            kept_output = std::max(kept_output, profiles[static_cast<std::size_t>(i)].kept_output_bytes);
          BOOST_TEST(std::abs(estimate.input_half_peak_bytes - measured.input_half_peak) <= kept_output);
          if (model.name == "resnet18" && estimate.weight_half_bytes > estimate.stash_bytes) ++heavier_weight_halves;
          // The first piece's input is the loader's batch: what its layers keep of it (or of a
          // reshape of it) costs the piece nothing.
          BOOST_TEST(estimate_piece(profiles, cost, 0, {begin, end}).stash_bytes ==
                     measured_kept(model, mb, begin, end, PieceInput::HeldElsewhere).stash);
        }
      }
  }
  BOOST_TEST(shared_boundaries > 0);   // the case this is about occurs in these models
  BOOST_TEST(heavier_weight_halves > 0);
}


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
      BOOST_CHECK_GT(p.input_half_seconds, 0.0);
      BOOST_CHECK_GT(p.weight_half_seconds, 0.0);
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

// With the job's optimizer given, each layer's step is timed: the layers with parameters take
// time, those without none; without it nothing is timed; and the optimizer's state is gone after.
BOOST_AUTO_TEST_CASE(the_optimizer_step_of_each_layer_is_timed_when_the_optimizer_is_given) {
  const auto device = kernels::Device::cpu();
  ProfileOptions options;
  options.micro_batch_size = 4;
  options.repeats = 2;
  for (const bool given : {false, true}) {
    if (given) {
      models::OptimizerConfig adam;
      adam.kind = models::OptimizerKind::Adam;
      options.optimizer = adam;
    }
    for (const auto& p : profile_layers(seed_cnn(), device, options)) {
      BOOST_TEST_CONTEXT(p.name << (given ? " with Adam" : " without an optimizer")) {
        if (given && p.parameters > 0) BOOST_CHECK_GT(p.optimizer_seconds, 0.0);
        else BOOST_CHECK_EQUAL(p.optimizer_seconds, 0.0);
      }
    }
    BOOST_CHECK_EQUAL(kernels::DeviceRuntime::get(device).allocator().stats().in_use, 0);
  }
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

// A model whose first layer reads ids (DLRM's packed click rows) is profiled with inputs it
// accepts: each id column an id of its table (random floats in [-1, 1) are no ids).
BOOST_AUTO_TEST_CASE(a_model_that_reads_ids_is_profiled_with_ids) {
  models::ModelOptions o;
  o.clicks.dense = 3;
  o.clicks.table_sizes = {50, 7};
  o.clicks.bag_size = 2;
  const auto model = describe(models::make_model_spec("dlrm", o));
  const auto profiles = profile_layers(model, kernels::Device::cpu(), 8, 1);
  BOOST_REQUIRE_EQUAL(profiles.size(), static_cast<std::size_t>(model.layer_count()));
  BOOST_CHECK_EQUAL(profiles.front().name, "features");
  BOOST_CHECK_GT(profiles.front().forward_seconds, 0.0);
  BOOST_CHECK_GT(profiles.front().param_bytes, (50 + 7) * o.embedding_dim * 4 - 1);
  // Every id drawn lies in its table; the dense columns stay in [-1, 1).
  auto features = model.layers.front().build();
  const auto x = features->example_input({64, 3 + 2 * 2}, kernels::Device::cpu(), 5).to_double_vector();
  for (std::size_t i = 0; i < x.size(); ++i) {
    const auto column = static_cast<int>(i % 7);
    if (column < 3) {
      BOOST_TEST((x[i] >= -1.0 && x[i] < 1.0));
    } else {
      const double rows = column < 5 ? 50 : 7;
      BOOST_TEST((x[i] >= 0 && x[i] < rows && x[i] == std::floor(x[i])));
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()

// The chains that time the layers cover every layer once, in order, each within the byte bound
// unless a layer alone exceeds it.
BOOST_AUTO_TEST_CASE(chain_windows_cover_the_layers_within_the_bound) {
  std::vector<LayerProfile> layers(6);
  const std::int64_t sizes[] = {10, 30, 5, 100, 20, 20};   // stash bytes; nothing else held
  for (std::size_t i = 0; i < layers.size(); ++i) layers[i].stash_bytes = sizes[i];
  using Windows = std::vector<std::pair<std::size_t, std::size_t>>;
  BOOST_TEST((chain_windows(layers, 1000) == Windows{{0, 6}}));
  BOOST_TEST((chain_windows(layers, 45) == Windows{{0, 3}, {3, 4}, {4, 6}}));
  BOOST_TEST((chain_windows(layers, 1) == Windows{{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {5, 6}}));
  layers[2].param_bytes = 10;   // weights and their gradients: 2 x 10 more
  BOOST_TEST((chain_windows(layers, 45) == Windows{{0, 2}, {2, 3}, {3, 4}, {4, 6}}));
  BOOST_TEST(chain_windows({}, 45).empty());
}

// Timed in windows of one layer or in one chain, every layer gets a forward and a backward time,
// and the split halves keep their share of the backward.
BOOST_AUTO_TEST_CASE(layers_timed_in_chains_of_any_length_have_their_times) {
  for (const std::int64_t window : {std::int64_t{1}, std::int64_t{1} << 30}) {
    ProfileOptions options;
    options.micro_batch_size = 2;
    options.repeats = 1;
    options.chain_window_bytes = window;
    const auto profiles = profile_layers(seed_cnn(), kernels::Device::cpu(), options);
    for (const auto& p : profiles) {
      BOOST_TEST_CONTEXT(p.name << ", window " << window) {
        BOOST_TEST(p.forward_seconds > 0.0);
        BOOST_TEST(p.backward_seconds > 0.0);
        BOOST_TEST(p.input_half_seconds > 0.0);
        BOOST_TEST(std::isfinite(p.input_half_seconds + p.weight_half_seconds));
      }
    }
  }
}

// A job's step is the median of whole steps, so a chain's layers add up to the median of the
// chain's totals: when each layer is slow in a different run, every total holds a slow layer and
// the medians alone would add up short.
BOOST_AUTO_TEST_CASE(layer_medians_add_up_to_the_median_total) {
  using Times = std::vector<std::vector<double>>;
  const auto scaled = medians_adding_up_to_the_median_total(Times{{1, 1, 2, 2, 1}, {2, 1, 1, 1, 2}});
  BOOST_TEST(scaled == (std::vector<double>{1.5, 1.5}), boost::test_tools::per_element());   // totals 3 2 3 3 3
  // Slow together: the medians already add up to the median total.
  const auto together = medians_adding_up_to_the_median_total(Times{{1, 3, 1}, {2, 6, 2}});
  BOOST_TEST(together == (std::vector<double>{1, 2}), boost::test_tools::per_element());
  BOOST_TEST(medians_adding_up_to_the_median_total(Times{}).empty());
  BOOST_TEST((medians_adding_up_to_the_median_total(Times{{}, {}}) == std::vector<double>{0, 0}));
}

// The chain and each co-runner's copy of it fit in half of the host's available memory together
// (the bound rounded down to a power of two): the window shrinks with the co-runners on a CPU
// device, not on a GPU (whose chain is in its own memory), and not when the available memory is
// unknown.
BOOST_AUTO_TEST_CASE(chain_windows_and_their_co_runners_fit_in_half_the_available_host_memory) {
  ProfileOptions options;
  options.chain_window_bytes = 1000;
  const auto cpu = kernels::Device::cpu(), gpu = kernels::Device::cuda(0);
  BOOST_TEST(chain_window_bytes_for(options, cpu, 0) == 1000);
  BOOST_TEST(chain_window_bytes_for(options, cpu, 1 << 20) == 1000);
  BOOST_TEST(chain_window_bytes_for(options, cpu, 1200) == 512);   // 600, rounded down
  options.co_runners = 3;
  BOOST_TEST(chain_window_bytes_for(options, cpu, 4096) == 512);
  BOOST_TEST(chain_window_bytes_for(options, cpu, 16000) == 1000);
  BOOST_TEST(chain_window_bytes_for(options, gpu, 4000) == 1000);
  BOOST_TEST(chain_window_bytes_for(options, cpu, 3) == 1);   // a layer over it is timed alone
}

// A chain with several micro-batches in flight holds each one's stashes and outputs at once: the
// windows shrink to fit them; weights are held once.
BOOST_AUTO_TEST_CASE(chain_windows_count_the_stash_of_every_micro_batch_in_flight) {
  std::vector<LayerProfile> layers(4);
  for (auto& l : layers) {
    l.stash_bytes = 10;
    l.param_bytes = 5;   // with its gradient: 10, held once
  }
  using Windows = std::vector<std::pair<std::size_t, std::size_t>>;
  BOOST_TEST((chain_windows(layers, 60, 1) == Windows{{0, 3}, {3, 4}}));
  BOOST_TEST((chain_windows(layers, 60, 2) == Windows{{0, 2}, {2, 4}}));
  BOOST_TEST((chain_windows(layers, 60, 5) == Windows{{0, 1}, {1, 2}, {2, 3}, {3, 4}}));
}

// With micro-batches in flight (forward of each, then their backwards in reverse) every layer is
// timed, and the chain's Contexts are all gone after; none in flight is refused.
BOOST_AUTO_TEST_CASE(layers_timed_with_micro_batches_in_flight_have_their_times) {
  const auto device = kernels::Device::cpu();
  ProfileOptions options;
  options.micro_batch_size = 2;
  options.repeats = 1;
  options.micro_batches_in_flight = 3;
  check_every_layer_timed(profile_layers(seed_cnn(), device, options));
  BOOST_CHECK_EQUAL(kernels::DeviceRuntime::get(device).allocator().stats().in_use, 0);
  options.micro_batches_in_flight = 0;
  BOOST_CHECK_EXCEPTION(profile_layers(seed_cnn(), device, options), InputError, [](const InputError& e) {
    return std::string(e.what()).find("at least 1 micro-batch in flight, got 0") != std::string::npos;
  });
  // A job's: one micro-batch a step keeps one in flight; two or more, two (more are no colder).
  BOOST_TEST(micro_batches_in_flight_of(1) == 1);
  BOOST_TEST(micro_batches_in_flight_of(2) == 2);
  BOOST_TEST(micro_batches_in_flight_of(8) == 2);
}

// With co-runners, each chain is timed again while threads run the same layers on CPU devices of
// their own: every timed layer has both times, and the co-runners' devices hold nothing after. A
// profile without them has none; a negative count is refused.
BOOST_AUTO_TEST_CASE(layers_are_timed_again_beside_co_runners_when_asked) {
  const auto device = kernels::Device::cpu(0);
  ProfileOptions options = small_options(2);
  options.micro_batches_in_flight = 2;
  for (const auto& p : profile_layers(seed_cnn(), device, options)) {
    BOOST_TEST(p.co_run_forward_seconds == 0.0);
    BOOST_TEST(p.co_run_backward_seconds == 0.0);
  }
  options.co_runners = 2;
  options.chain_window_bytes = 1;   // a chain per layer: the co-runners start and stop for each
  // The co-runners run on cpu:1 and cpu:2 with cpu:0's thread count, then give theirs back.
  auto& beside = kernels::DeviceRuntime::get(kernels::Device::cpu(1));
  const int threads_before = beside.threads();
  beside.set_threads(threads_before + 1);
  for (int k = 1; k <= 2; ++k) kernels::DeviceRuntime::get(kernels::Device::cpu(k)).allocator().reset_peak();
  for (const auto& p : profile_layers(seed_cnn(), device, options)) {
    BOOST_TEST_CONTEXT(p.name) {
      BOOST_TEST(p.co_run_forward_seconds > 0.0);
      BOOST_TEST(p.co_run_backward_seconds > 0.0);
    }
  }
  for (int k = 1; k <= 2; ++k)   // they ran the layers there
    BOOST_TEST(kernels::DeviceRuntime::get(kernels::Device::cpu(k)).allocator().stats().peak_in_use > 0);
  BOOST_TEST(beside.threads() == threads_before + 1);
  beside.set_threads(threads_before);
  for (int k = 0; k <= 2; ++k)
    BOOST_CHECK_EQUAL(kernels::DeviceRuntime::get(kernels::Device::cpu(k)).allocator().stats().in_use, 0);
  options.co_runners = -1;
  BOOST_CHECK_EXCEPTION(profile_layers(seed_cnn(), device, options), InputError, [](const InputError& e) {
    return std::string(e.what()).find("negative number of threads") != std::string::npos;
  });
}

// A minimum chain time keeps timing past the repeats and still gives every layer its times; a
// negative or non-finite one is refused.
BOOST_AUTO_TEST_CASE(a_minimum_chain_time_is_taken_and_a_bad_one_refused) {
  const auto device = kernels::Device::cpu(0);
  ProfileOptions options = small_options(1);
  options.min_chain_seconds = 0.02;
  check_every_layer_timed(profile_layers(seed_cnn(), device, options));
  for (const double bad : {-1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
    options.min_chain_seconds = bad;
    BOOST_CHECK_EXCEPTION(profile_layers(seed_cnn(), device, options), InputError, [](const InputError& e) {
      return std::string(e.what()).find("chain time of 0 seconds or more") != std::string::npos;
    });
  }
}

// A device's slowdown beside the others is its layers' summed times with co-runners over those
// alone, less one: never below 0, and 0 where any of its timed layers was not measured so.
BOOST_AUTO_TEST_CASE(co_run_slowdowns_are_summed_over_each_devices_layers) {
  std::vector<LayerProfile> layers(5);
  const double alone[5][2] = {{1, 2}, {1, 1}, {2, 2}, {1, 1}, {1, 1}};
  const double beside[5][2] = {{1.5, 2.5}, {1, 2}, {2, 1}, {1, 1}, {0, 0}};
  for (std::size_t i = 0; i < layers.size(); ++i) {
    layers[i].forward_seconds = alone[i][0];
    layers[i].backward_seconds = alone[i][1];
    layers[i].co_run_forward_seconds = beside[i][0];
    layers[i].co_run_backward_seconds = beside[i][1];
  }
  const auto piece = [](int device, int begin, int end) {
    StageEstimate e;
    e.device = device;
    e.range = {begin, end};
    return e;
  };
  // Device 0: layers 0-1 (5 alone, 7 beside); device 1: layers 2-3, faster beside (noise);
  // device 2: layer 4, not measured.
  const auto s = co_run_slowdowns(layers, {piece(0, 0, 2), piece(1, 2, 4), piece(2, 4, 5)}, 3);
  BOOST_TEST(s.size() == 3u);
  BOOST_TEST(s[0] == 0.4, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(s[1] == 0.0);
  BOOST_TEST(s[2] == 0.0);
  // Two pieces on one device (interleaved chunks) count together: layers 0 and 3, 5 alone, 6 beside.
  const auto chunks = co_run_slowdowns(layers, {piece(0, 0, 1), piece(1, 1, 2), piece(0, 3, 4)}, 2);
  BOOST_TEST(chunks[0] == 0.2, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(chunks[1] == 0.5, boost::test_tools::tolerance(1e-12));
}
