// Selective recomputation in Sequential (Sequential::set_recomputed_children): a chosen child keeps
// no context, a run of them keeps only its input, and its backward re-runs the run's forwards first.
// Results are bitwise those of keeping every context (batch norm, dropout, both backward halves),
// running statistics move once per forward, and the training forward holds less.
#include <optional>
#include <set>

#include <boost/test/unit_test.hpp>

#include "kernels/runtime.h"
#include "models/forward_key.h"
#include "models/layers/batch_norm.h"
#include "models/layers/conv2d.h"
#include "models/layers/linear.h"
#include "models/layers/sequential.h"
#include "models/layers/simple.h"
#include "models/loss.h"
#include "models/rng.h"
#include "tests/support/test_util.h"

using namespace pw;
using namespace pw::models;
using kernels::Tensor;

namespace {

std::unique_ptr<Sequential> small_net() {
  auto net = std::make_unique<Sequential>();
  net->add("conv1", std::make_unique<Conv2d>(2, 6, 3, 1, 1));
  net->add("bn1", std::make_unique<BatchNorm2d>(6));
  net->add("relu1", std::make_unique<ReLU>());
  net->add("drop1", std::make_unique<Dropout>(0.3, 5));
  net->add("conv2", std::make_unique<Conv2d>(6, 4, 3, 1, 1));
  net->add("relu2", std::make_unique<ReLU>());
  net->add("flatten", std::make_unique<Flatten>());
  net->add("fc", std::make_unique<Linear>(4 * 8 * 8, 5));
  net->initialize(3);
  return net;
}

enum class Halves { Full, Split };

struct Run {
  Tensor y, grad_input;
  std::vector<std::pair<std::string, Tensor>> grads, buffers;
};

// One training forward and backward of `net` on a fixed batch, twice in a row (gradients add up;
// the batch-norm statistics move twice).
Run train_twice(Sequential& net, Halves halves) {
  const Tensor x = test::random_tensor({3, 2, 8, 8}, 11);
  const Tensor labels = Tensor::from_vector(std::vector<std::int64_t>{0, 3, 4}, {3});
  Run r;
  for (int i = 0; i < 2; ++i) {
    auto out = net.forward(x, Mode::Train);
    auto loss = softmax_cross_entropy(out.y, labels, 1.0 / 3);
    if (halves == Halves::Full) {
      r.grad_input = net.backward(*out.ctx, loss.grad_logits);
    } else {
      r.grad_input = net.backward_input(*out.ctx, loss.grad_logits);
      net.backward_weight(*out.ctx);
    }
    r.y = out.y;
  }
  for (auto& [name, p] : net.named_parameters()) r.grads.emplace_back(name, p->grad.clone());
  for (auto& [name, b] : net.named_buffers()) r.buffers.emplace_back(name, b->value.clone());
  return r;
}

void check_same(const Run& a, const Run& b) {
  test::check_close(a.y, b.y, 0, 0, "output");
  test::check_close(a.grad_input, b.grad_input, 0, 0, "input gradient");
  BOOST_REQUIRE_EQUAL(a.grads.size(), b.grads.size());
  for (std::size_t i = 0; i < a.grads.size(); ++i) test::check_close(a.grads[i].second, b.grads[i].second, 0, 0, a.grads[i].first);
  for (std::size_t i = 0; i < a.buffers.size(); ++i)
    test::check_close(a.buffers[i].second, b.buffers[i].second, 0, 0, a.buffers[i].first);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(sequential_recompute)

BOOST_AUTO_TEST_CASE(recomputed_children_give_the_same_bits) {
  const std::vector<std::set<std::string>> choices{
      {"conv1"}, {"bn1", "relu1", "drop1"}, {"conv1", "bn1", "relu1", "drop1", "conv2", "relu2", "flatten", "fc"},
      {"conv1", "drop1", "relu2", "fc"}, {"drop1"}};
  ForwardKeyGuard key(42);   // as the pipeline sets one per micro-batch
  for (const auto halves : {Halves::Full, Halves::Split}) {
    auto plain = small_net();
    const Run expected = train_twice(*plain, halves);
    for (const auto& chosen : choices) {
      BOOST_TEST_CONTEXT((halves == Halves::Full ? "full" : "split") << ", " << chosen.size() << " layers from "
                                                                     << *chosen.begin()) {
        auto net = small_net();
        net->set_recomputed_children(chosen);
        for (std::size_t i = 0; i < net->size(); ++i)
          BOOST_TEST(net->recomputes_child(i) == chosen.contains(net->children()[i].first));
        check_same(train_twice(*net, halves), expected);
      }
    }
  }
}

// Without a forward key, a chosen dropout's rebuilt mask is the first run's: the gradient equals
// the plain net's under the key the recomputing net made for itself.
BOOST_AUTO_TEST_CASE(a_keyless_forward_rebuilds_its_own_dropout_mask) {
  auto net = small_net();
  net->set_recomputed_children({"drop1", "conv2"});
  const Run got = train_twice(*net, Halves::Full);
  auto plain = small_net();
  Run expected;
  {
    // The net's keys: splitmix64 of its forward count, 1 then 2.
    const Tensor x = test::random_tensor({3, 2, 8, 8}, 11);
    const Tensor labels = Tensor::from_vector(std::vector<std::int64_t>{0, 3, 4}, {3});
    for (std::uint64_t i = 1; i <= 2; ++i) {
      ForwardKeyGuard key(splitmix64(i));
      auto out = plain->forward(x, Mode::Train);
      auto loss = softmax_cross_entropy(out.y, labels, 1.0 / 3);
      expected.grad_input = plain->backward(*out.ctx, loss.grad_logits);
      expected.y = out.y;
    }
    for (auto& [name, p] : plain->named_parameters()) expected.grads.emplace_back(name, p->grad.clone());
    for (auto& [name, b] : plain->named_buffers()) expected.buffers.emplace_back(name, b->value.clone());
  }
  check_same(got, expected);
}

BOOST_AUTO_TEST_CASE(a_training_forward_holds_less) {
  const auto device = kernels::Device::cpu();
  auto& allocator = kernels::DeviceRuntime::get(device).allocator();
  const auto held_after_forward = [&](const std::set<std::string>& chosen) {
    auto net = small_net();
    net->set_recomputed_children(chosen);
    allocator.release_cache();
    const std::int64_t start = allocator.stats().in_use;
    ForwardKeyGuard key(7);
    auto out = net->forward(test::random_tensor({3, 2, 8, 8}, 11), Mode::Train);
    out.y = Tensor();
    return allocator.stats().in_use - start;
  };
  const auto all = held_after_forward({});
  const auto some = held_after_forward({"bn1", "relu1", "drop1"});
  const auto every = held_after_forward({"conv1", "bn1", "relu1", "drop1", "conv2", "relu2", "flatten", "fc"});
  BOOST_TEST(some < all);
  BOOST_TEST(every < some);
  BOOST_TEST(every == 3 * 2 * 8 * 8 * 4);   // the input alone
}

BOOST_AUTO_TEST_CASE(names_it_does_not_hold_are_ignored) {
  auto net = small_net();
  net->set_recomputed_children({"block7", "stage3.conv"});
  for (std::size_t i = 0; i < net->size(); ++i) BOOST_TEST(!net->recomputes_child(i));
}

BOOST_AUTO_TEST_SUITE_END()
