// Partitioners: uniform and by parameters on resnet18, the dynamic program against brute force on
// random profiles, memory caps, and the "no split fits" error.
#include <algorithm>
#include <random>

#include <boost/test/unit_test.hpp>

#include "partition/cost_model.h"
#include "partition/min_max_split.h"
#include "partition/partitioners.h"
#include "partition/profile_partitioner.h"
#include "tests/partition/brute_force.h"

using namespace pw;
using namespace pw::partition;

namespace {

constexpr std::int64_t kMiB = 1024 * 1024;
constexpr std::int64_t kGiB = 1024 * kMiB;

ModelDescription resnet18() {
  models::ModelOptions o;
  o.width = 16;
  o.sample_shape = {3, 32, 32};
  return describe(models::make_model_spec("resnet18", o));
}

void check_covers(const Partition& p, int layers, int stages) {
  BOOST_REQUIRE_EQUAL(p.size(), static_cast<std::size_t>(stages));
  int expected = 0;
  for (const auto& s : p) {
    BOOST_CHECK_EQUAL(s.begin, expected);
    BOOST_CHECK_GT(s.end, s.begin);
    expected = s.end;
  }
  BOOST_CHECK_EQUAL(expected, layers);
}

std::vector<LayerProfile> random_profiles(std::mt19937_64& rng, int n) {
  std::uniform_real_distribution<double> time(0.1, 5.0);
  std::uniform_int_distribution<std::int64_t> bytes(0, 64 * kMiB);
  std::vector<LayerProfile> layers(static_cast<std::size_t>(n));
  std::int64_t input = 3 * kMiB;
  for (int i = 0; i < n; ++i) {
    auto& l = layers[static_cast<std::size_t>(i)];
    l.name = "layer" + std::to_string(i);
    l.forward_seconds = time(rng);
    l.backward_seconds = 2 * time(rng);
    l.input_bytes = input;
    l.output_bytes = bytes(rng);
    input = l.output_bytes;
    l.stash_bytes = bytes(rng);
    l.workspace_bytes = bytes(rng) / 4;
    l.param_bytes = rng() % 3 == 0 ? 0 : bytes(rng);
    l.parameters = l.param_bytes / 4;
  }
  return layers;
}

// The best worst-stage step time over every split whose stages all fit; -1 when none fits.
double brute_force_best(const std::vector<LayerProfile>& layers, const CostModel& cost) {
  double best = -1;
  test::for_each_partition(static_cast<int>(layers.size()), cost.pieces(), [&](const Partition& p) {
    double worst = 0;
    for (const auto& e : estimate_stages(layers, cost, p)) {
      if (!e.fits()) return;
      worst = std::max(worst, e.step_seconds);
    }
    if (best < 0 || worst < best) best = worst;
  });
  return best;
}

double worst_step(const std::vector<StageEstimate>& estimates) {
  double worst = 0;
  for (const auto& e : estimates) worst = std::max(worst, e.step_seconds);
  return worst;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(partitioners)

BOOST_AUTO_TEST_CASE(method_names_parse_and_bad_ones_are_listed) {
  BOOST_CHECK(parse_partition_method("uniform") == PartitionMethod::Uniform);
  BOOST_CHECK(parse_partition_method("params") == PartitionMethod::Params);
  BOOST_CHECK(parse_partition_method("profile") == PartitionMethod::Profile);
  BOOST_CHECK_EQUAL(partition_method_name(PartitionMethod::Params), "params");
  BOOST_CHECK_EXCEPTION(parse_partition_method("greedy"), InputError, [](const InputError& e) {
    return std::string(e.what()) == "unknown partition method 'greedy'; accepted: uniform, params, profile";
  });
  BOOST_CHECK(parse_recompute("except-last") == Recompute::ExceptLast);
  BOOST_CHECK_THROW(parse_recompute("some"), InputError);
  BOOST_CHECK_EQUAL(optimizer_state_tensors(models::OptimizerKind::Adam), 2);
  BOOST_CHECK_EQUAL(optimizer_state_tensors(models::OptimizerKind::Sgd), 1);
  BOOST_CHECK_EQUAL(optimizer_state_tensors(models::OptimizerKind::Adagrad), 1);
}

BOOST_AUTO_TEST_CASE(uniform_gives_equal_layer_counts) {
  const auto d = resnet18();
  for (int stages = 1; stages <= d.layer_count(); ++stages) {
    const auto p = partition_uniform(d.layer_count(), stages);
    check_covers(p, d.layer_count(), stages);
    const auto [smallest, largest] = std::minmax_element(p.begin(), p.end(), [](auto& a, auto& b) { return a.size() < b.size(); });
    BOOST_CHECK_LE(largest->size() - smallest->size(), 1);
  }
  BOOST_CHECK(partition_uniform(14, 4) == (Partition{{0, 3}, {3, 7}, {7, 10}, {10, 14}}));
}

BOOST_AUTO_TEST_CASE(params_balance_is_the_best_possible_on_resnet18) {
  const auto d = resnet18();
  const auto counts = layer_parameter_counts(d);
  BOOST_REQUIRE_EQUAL(counts.size(), 14u);
  BOOST_CHECK_EQUAL(counts[2], 0);   // relu: no parameters, still placed
  for (int stages : {1, 2, 3, 4, 6, 14}) {
    const auto p = partition_by_params(counts, stages);
    check_covers(p, d.layer_count(), stages);
    std::int64_t largest = 0;
    for (const auto& s : p) largest = std::max(largest, stage_parameters(counts, s));
    std::int64_t best = -1;
    test::for_each_partition(d.layer_count(), stages, [&](const Partition& q) {
      std::int64_t worst = 0;
      for (const auto& s : q) worst = std::max(worst, stage_parameters(counts, s));
      if (best < 0 || worst < best) best = worst;
    });
    BOOST_CHECK_MESSAGE(largest == best, stages << " stages: largest stage " << largest << ", best possible " << best);
  }
  // layer4 holds most of ResNet's weights: two stages cut inside it.
  const auto two = partition_by_params(counts, 2);
  BOOST_CHECK_GE(two[1].begin, 9);
}

BOOST_AUTO_TEST_CASE(min_max_split_matches_brute_force_with_position_dependent_costs) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 9);
    const int groups = 1 + static_cast<int>(rng() % static_cast<unsigned>(n));
    std::vector<double> weight(static_cast<std::size_t>(n));
    for (auto& w : weight) w = static_cast<double>(rng() % 100);
    const double limit = static_cast<double>(rng() % 300);
    const GroupCost cost = [&](int g, int b, int e) {
      double sum = 0;
      for (int i = b; i < e; ++i) sum += weight[static_cast<std::size_t>(i)];
      sum *= 1.0 + 0.25 * g;
      return sum > limit ? kInfeasible : sum;
    };
    double best = kInfeasible;
    test::for_each_partition(n, groups, [&](const Partition& p) {
      double worst = 0;
      for (std::size_t g = 0; g < p.size(); ++g) worst = std::max(worst, cost(static_cast<int>(g), p[g].begin, p[g].end));
      best = std::min(best, worst);
    });
    const auto result = min_max_split(n, groups, cost);
    BOOST_REQUIRE_EQUAL(result.worst_cost, best);
    if (best == kInfeasible) {
      BOOST_CHECK(result.partition.empty());
      continue;
    }
    check_covers(result.partition, n, groups);
    double worst = 0;
    for (std::size_t g = 0; g < result.partition.size(); ++g) {
      worst = std::max(worst, cost(static_cast<int>(g), result.partition[g].begin, result.partition[g].end));
    }
    BOOST_CHECK_EQUAL(worst, best);
  }
}

BOOST_AUTO_TEST_CASE(profile_partition_is_optimal_and_respects_caps) {
  std::mt19937_64 rng(5);
  int feasible = 0, infeasible = 0;
  for (int trial = 0; trial < 150; ++trial) {
    const int n = 2 + static_cast<int>(rng() % 8);
    const auto layers = random_profiles(rng, n);
    CostModel cost;
    cost.stages = 1 + static_cast<int>(rng() % std::min(4, n));
    cost.chunks = (rng() % 4 == 0 && 2 * cost.stages <= n) ? 2 : 1;
    cost.micro_batches = 1 + static_cast<int>(rng() % 8);
    cost.in_flight = rng() % 2 == 0 ? InFlight::AllMicroBatches : InFlight::StagesAhead;
    cost.recompute = static_cast<Recompute>(rng() % 3);
    cost.optimizer_state = 1 + static_cast<int>(rng() % 2);
    cost.link = {1e8 + static_cast<double>(rng() % 1000) * 1e7, 1e-4};
    cost.device_memory = {static_cast<std::int64_t>(100 + rng() % 900) * kMiB};
    const double best = brute_force_best(layers, cost);
    BOOST_TEST_CONTEXT("trial " << trial << ": " << n << " layers, " << cost.stages << " stages x " << cost.chunks) {
      if (best < 0) {
        ++infeasible;
        BOOST_CHECK_THROW(partition_by_profile(layers, cost, "random"), InputError);
        continue;
      }
      ++feasible;
      const auto p = partition_by_profile(layers, cost, "random");
      check_covers(p, n, cost.pieces());
      const auto estimates = estimate_stages(layers, cost, p);
      for (const auto& e : estimates) BOOST_CHECK_LE(e.memory_bytes, e.memory_cap);
      BOOST_CHECK_CLOSE(worst_step(estimates), best, 1e-9);
    }
  }
  BOOST_CHECK_GT(feasible, 20);
  BOOST_CHECK_GT(infeasible, 5);
}

BOOST_AUTO_TEST_CASE(memory_estimate_follows_the_schedule_and_recompute) {
  std::vector<LayerProfile> layers(3);
  for (int i = 0; i < 3; ++i) {
    auto& l = layers[static_cast<std::size_t>(i)];
    l.name = "l" + std::to_string(i);
    l.forward_seconds = 1;
    l.backward_seconds = 2;
    l.input_bytes = 10;
    l.output_bytes = 10;
    l.stash_bytes = 100;
    l.param_bytes = 1000;
    l.buffer_bytes = 4;
  }
  CostModel cost;
  cost.stages = 3;
  cost.micro_batches = 8;
  cost.optimizer_state = 2;
  cost.link = {10.0, 0.5};   // 10 bytes per second: one second per boundary activation
  auto e = estimate_piece(layers, cost, 0, {0, 1});
  BOOST_CHECK_EQUAL(e.weight_bytes, 1000 * 4 + 4);
  BOOST_CHECK_EQUAL(e.activation_bytes, 3 * 100);   // 1F1B: stage 0 of 3 holds 3 micro-batches
  BOOST_CHECK_CLOSE(e.send_seconds, 1.5, 1e-9);
  BOOST_CHECK_CLOSE(e.step_seconds, 8 * (1 + 2 + 1.5), 1e-9);
  BOOST_CHECK_EQUAL(estimate_piece(layers, cost, 2, {2, 3}).activation_bytes, 1 * 100);
  BOOST_CHECK_EQUAL(estimate_piece(layers, cost, 2, {2, 3}).send_seconds, 0.0);
  cost.in_flight = InFlight::AllMicroBatches;
  BOOST_CHECK_EQUAL(estimate_piece(layers, cost, 2, {2, 3}).activation_bytes, 8 * 100);
  cost.recompute = Recompute::All;
  e = estimate_piece(layers, cost, 1, {1, 2});
  BOOST_CHECK(e.recomputes);
  BOOST_CHECK_EQUAL(e.activation_bytes, 8 * 10 + 100);   // inputs of all in flight plus one full stash
  BOOST_CHECK_CLOSE(e.backward_seconds, 3.0, 1e-9);      // forward re-run before backward
  // The first piece's inputs are views of the data loader's batch, counted with the loader.
  BOOST_CHECK_EQUAL(estimate_piece(layers, cost, 0, {0, 1}).activation_bytes, 100);
  cost.recompute = Recompute::ExceptLast;
  BOOST_CHECK(!estimate_piece(layers, cost, 2, {2, 3}).recomputes);
  BOOST_CHECK(estimate_piece(layers, cost, 1, {1, 2}).recomputes);
}

BOOST_AUTO_TEST_CASE(no_split_that_fits_says_by_how_much) {
  // Four layers of 256 MiB of weights each: with Adam every layer needs 1 GiB.
  std::vector<LayerProfile> layers(4);
  for (int i = 0; i < 4; ++i) {
    auto& l = layers[static_cast<std::size_t>(i)];
    l.name = "l" + std::to_string(i);
    l.forward_seconds = l.backward_seconds = 1;
    l.param_bytes = 256 * kMiB;
  }
  CostModel cost;
  cost.stages = 2;
  cost.micro_batches = 4;
  cost.optimizer_state = 2;
  cost.device_memory = {3 * kGiB / 2};
  BOOST_CHECK_EXCEPTION(partition_by_profile(layers, cost, "toy"), InputError, [](const InputError& e) {
    const std::string expected =
        "no split of toy into 2 stages fits a 1.50 GiB cap: the best puts 2.00 GiB on stage 0 (0.50 GiB over; its "
        "weights, gradients and optimizer state alone take 2.00 GiB); use more stages or a larger memory cap";
    BOOST_CHECK_EQUAL(e.what(), expected);
    return true;
  });
  cost.stages = 4;
  BOOST_CHECK(partition_by_profile(layers, cost, "toy") == (Partition{{0, 1}, {1, 2}, {2, 3}, {3, 4}}));

  // Activations over the cap: recompute is suggested.
  for (auto& l : layers) {
    l.param_bytes = 0;
    l.stash_bytes = 400 * kMiB;
    l.input_bytes = kMiB;
  }
  cost.stages = 2;
  cost.device_memory = {kGiB};
  BOOST_CHECK_EXCEPTION(partition_by_profile(layers, cost, "toy"), InputError, [](const InputError& e) {
    const std::string expected =
        "no split of toy into 2 stages fits a 1.00 GiB cap: the best puts 1.17 GiB on stage 1 (0.17 GiB over); use more "
        "stages, a larger memory cap, more (smaller) micro-batches or recompute all";
    BOOST_CHECK_EQUAL(e.what(), expected);
    return true;
  });
  cost.recompute = Recompute::All;
  BOOST_CHECK_EQUAL(partition_by_profile(layers, cost, "toy").size(), 2u);
}

BOOST_AUTO_TEST_CASE(profile_partition_balances_time_without_a_cap) {
  std::vector<LayerProfile> layers(6);
  const double times[] = {1, 1, 4, 1, 1, 4};
  for (std::size_t i = 0; i < layers.size(); ++i) {
    layers[i].name = "l" + std::to_string(i);
    layers[i].forward_seconds = times[i];
  }
  CostModel cost;
  cost.stages = 2;
  cost.micro_batches = 2;
  BOOST_CHECK(partition_by_profile(layers, cost, "toy") == (Partition{{0, 3}, {3, 6}}));
  cost.stages = 7;
  BOOST_CHECK_THROW(partition_by_profile(layers, cost, "toy"), InputError);
}

BOOST_AUTO_TEST_SUITE_END()
