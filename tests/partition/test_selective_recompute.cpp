// piece_stash: what a piece holds per micro-batch when chosen layers recompute equals what a stage's
// Sequential really keeps after a training forward with those layers set to recompute, for runs of
// layers of the seed CNN and a small ResNet and several choices of layers in each; and the cost
// model charges the rebuilt forwards to the backward.
#include <set>

#include <boost/test/unit_test.hpp>

#include "kernels/runtime.h"
#include "models/forward_key.h"
#include "partition/cost_model.h"
#include "partition/selective_recompute.h"

using namespace pw;
using namespace pw::partition;

namespace {
ModelDescription model_named(const std::string& name) {
  models::ModelOptions o;
  o.width = 4;
  o.sample_shape = name == "seed-cnn" ? kernels::Shape{1, 28, 28} : kernels::Shape{3, 16, 16};
  return describe(models::make_model_spec(name, o));
}

// What layers [begin, end), chained in a Sequential with `recomputed` set, keep after a training
// forward: the stage's context only, each child's forward from an empty cache as profiled.
std::int64_t measured_held(const ModelDescription& model, std::int64_t micro_batch, StageRange range,
                           const std::set<std::string>& recomputed) {
  const auto device = kernels::Device::cpu();
  auto& allocator = kernels::DeviceRuntime::get(device).allocator();
  auto stage = build_stage(model, range, 1);
  stage->set_recomputed_children(recomputed);
  stage->set_forward_hook([&](const std::string&, models::Layer&) { allocator.release_cache(); });
  const auto shapes = layer_shapes(model, micro_batch);
  allocator.release_cache();
  const std::int64_t start = allocator.stats().in_use;
  models::ForwardKeyGuard key(3);
  std::unique_ptr<models::Context> ctx;
  {
    const kernels::Tensor x = kernels::Tensor::zeros(shapes[static_cast<std::size_t>(range.begin)], kernels::DType::F32, device);
    ctx = stage->forward(x, models::Mode::Train).ctx;
  }
  return allocator.stats().in_use - start;
}

// Choices of layers within [begin, end): each one alone, the first half, every other one, all.
std::vector<std::set<std::string>> choices_in(const std::vector<LayerProfile>& profiles, StageRange range) {
  std::vector<std::set<std::string>> out;
  std::set<std::string> half, alternate, all;
  for (int i = range.begin; i < range.end; ++i) {
    const auto& name = profiles[static_cast<std::size_t>(i)].name;
    out.push_back({name});
    if (i < range.begin + (range.end - range.begin + 1) / 2) half.insert(name);
    if ((i - range.begin) % 2 == 0) alternate.insert(name);
    all.insert(name);
  }
  out.push_back(half);
  out.push_back(alternate);
  out.push_back(all);
  return out;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(selective_recompute)

BOOST_AUTO_TEST_CASE(the_predicted_stash_is_what_the_stage_keeps) {
  const std::int64_t mb = 4;
  int fewer = 0;
  for (const auto* name : {"seed-cnn", "resnet18"}) {
    const auto model = model_named(name);
    const auto profiles = profile_layers(model, kernels::Device::cpu(), mb, 1);
    const int n = static_cast<int>(profiles.size());
    for (int begin = 0; begin < n; ++begin)
      for (int end = begin + 1; end <= n; end += 2) {
        const StageRange range{begin, end};
        const auto plain = piece_stash(profiles, range, {}).held_bytes;
        for (const auto& chosen : choices_in(profiles, range)) {
          BOOST_TEST_CONTEXT(name << " layers [" << begin << ", " << end << "), " << chosen.size() << " from "
                                  << *chosen.begin()) {
            const auto predicted = piece_stash(profiles, range, chosen);
            BOOST_TEST(predicted.held_bytes == measured_held(model, mb, range, chosen));
            BOOST_TEST(predicted.recomputed_layers == static_cast<int>(chosen.size()));
            if (predicted.held_bytes < plain) ++fewer;
          }
        }
      }
  }
  BOOST_TEST(fewer > 0);
}

BOOST_AUTO_TEST_CASE(the_cost_model_charges_the_rebuilt_forwards_to_the_backward) {
  const auto model = model_named("seed-cnn");
  const auto profiles = profile_layers(model, kernels::Device::cpu(), 4, 1);
  const StageRange range{0, static_cast<int>(profiles.size())};
  CostModel cost;
  const auto plain = estimate_piece(profiles, cost, 0, range);
  cost.recompute_layers = {profiles[1].name, profiles[2].name};
  const auto selective = estimate_piece(profiles, cost, 0, range);
  BOOST_TEST(selective.rebuild_seconds == profiles[1].forward_seconds + profiles[2].forward_seconds);
  BOOST_TEST(selective.backward_seconds == plain.backward_seconds + selective.rebuild_seconds);
  BOOST_TEST(selective.stash_bytes < plain.stash_bytes);
  BOOST_TEST(selective.rebuild_bytes > 0);
  BOOST_TEST(selective.activation_bytes == selective.stash_bytes + selective.rebuild_bytes + selective.workspace_bytes);
  // A stage that recomputes everything re-runs the chosen layers with the rest: nothing selective.
  cost.recompute = Recompute::All;
  const auto all = estimate_piece(profiles, cost, 0, range);
  BOOST_TEST(all.rebuild_seconds == 0.0);
  BOOST_TEST(all.stash_bytes == plain.stash_bytes);
  BOOST_TEST(all.backward_seconds == plain.backward_seconds + plain.forward_seconds);
}

BOOST_AUTO_TEST_SUITE_END()
