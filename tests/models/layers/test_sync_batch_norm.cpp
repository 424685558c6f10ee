// Synchronised batch-norm: two members, each with half of a batch, give the outputs, input
// gradients, parameter gradients (summed) and running statistics of one layer over the whole
// batch; a group of one gives plain batch-norm's.
#include <barrier>
#include <cmath>
#include <random>
#include <thread>

#include <boost/test/unit_test.hpp>

#include "models/layers/batch_norm.h"
#include "pipeline/micro_batch.h"

using namespace pw;
using kernels::Tensor;

namespace {

Tensor random(const kernels::Shape& shape, unsigned seed, float offset) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(offset, 2.0f);
  std::vector<float> v(static_cast<std::size_t>(kernels::shape_numel(shape)));
  for (auto& x : v) x = d(rng);
  return Tensor::from_vector(v, shape);
}

double worst_relative(const std::vector<double>& a, const std::vector<double>& b) {
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  double scale = 0.0, worst = 0.0;
  for (double x : b) scale = std::max(scale, std::abs(x));
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]) / (scale + 1e-12));
  return worst;
}

// Sums a tensor over two threads: each adds its values into a shared slot, then reads the total.
class TwoPartySum {
 public:
  void operator()(int member, Tensor& values) {
    {
      std::lock_guard lock(mutex_);
      if (total_.empty()) total_.assign(static_cast<std::size_t>(values.numel()), 0.0);
      const auto v = values.to_double_vector();
      parts_[member] = v;
    }
    arrive_.arrive_and_wait();
    std::vector<double> sum(parts_[0].size());
    for (std::size_t i = 0; i < sum.size(); ++i) sum[i] = parts_[0][i] + parts_[1][i];   // same order on both
    std::vector<float> f(sum.begin(), sum.end());
    values.copy_from(Tensor::from_vector(f, values.shape()));
    arrive_.arrive_and_wait();
    std::lock_guard lock(mutex_);
    total_.clear();
  }

 private:
  std::mutex mutex_;
  std::vector<double> total_;
  std::vector<double> parts_[2];
  std::barrier<> arrive_{2};
};

}  // namespace

BOOST_AUTO_TEST_SUITE(sync_batch_norm)

BOOST_AUTO_TEST_CASE(two_halves_in_sync_equal_one_layer_over_the_batch) {
  const Tensor x = random({8, 3, 5, 5}, 1, 0.7f);
  const Tensor dy = random({8, 3, 5, 5}, 2, 0.0f);
  models::BatchNorm2d whole(3);
  auto out = whole.forward(x, models::Mode::Train);
  const Tensor dx = whole.backward(*out.ctx, dy);

  const auto xs = pipeline::split_batch(x, 2);
  const auto dys = pipeline::split_batch(dy, 2);
  models::BatchNorm2d half[2] = {models::BatchNorm2d(3), models::BatchNorm2d(3)};
  TwoPartySum sum;
  Tensor y[2], dx_half[2];
  std::vector<std::thread> members;
  for (int m = 0; m < 2; ++m) {
    half[m].set_group_sum([&sum, m](Tensor& values) { sum(m, values); });
    members.emplace_back([&, m] {
      auto o = half[m].forward(xs[static_cast<std::size_t>(m)], models::Mode::Train);
      y[m] = o.y;
      dx_half[m] = half[m].backward(*o.ctx, dys[static_cast<std::size_t>(m)]);
    });
  }
  for (auto& t : members) t.join();

  auto joined = [](const Tensor& a, const Tensor& b) {
    auto v = a.to_double_vector();
    const auto w = b.to_double_vector();
    v.insert(v.end(), w.begin(), w.end());
    return v;
  };
  BOOST_TEST(worst_relative(joined(y[0], y[1]), out.y.to_double_vector()) <= 1e-5);
  BOOST_TEST(worst_relative(joined(dx_half[0], dx_half[1]), dx.to_double_vector()) <= 1e-5);
  for (const char* name : {"weight", "bias"}) {
    std::vector<double> summed;
    for (int m = 0; m < 2; ++m)
      for (auto& [n, p] : half[m].named_parameters())
        if (n == name) {
          const auto g = p->grad.to_double_vector();
          if (summed.empty()) summed = g;
          else
            for (std::size_t i = 0; i < g.size(); ++i) summed[i] += g[i];
        }
    for (auto& [n, p] : whole.named_parameters())
      if (n == name) BOOST_TEST_CONTEXT(name) { BOOST_TEST(worst_relative(summed, p->grad.to_double_vector()) <= 1e-5); }
  }
  for (std::size_t b = 0; b < 2; ++b) {
    const auto mine = half[0].named_buffers()[b].second->value.to_double_vector();
    const auto theirs = half[1].named_buffers()[b].second->value.to_double_vector();
    BOOST_TEST(mine == theirs);
    BOOST_TEST(worst_relative(mine, whole.named_buffers()[b].second->value.to_double_vector()) <= 1e-5);
  }
}

BOOST_AUTO_TEST_CASE(a_group_of_one_is_plain_batch_norm) {
  const Tensor x = random({6, 4, 3, 3}, 3, -1.5f);
  const Tensor dy = random({6, 4, 3, 3}, 4, 0.0f);
  models::BatchNorm2d plain(4), alone(4);
  alone.set_group_sum([](Tensor&) {});
  auto a = plain.forward(x, models::Mode::Train);
  auto b = alone.forward(x, models::Mode::Train);
  BOOST_TEST(worst_relative(b.y.to_double_vector(), a.y.to_double_vector()) <= 1e-5);
  const auto da = plain.backward(*a.ctx, dy);
  const auto db = alone.backward(*b.ctx, dy);
  BOOST_TEST(worst_relative(db.to_double_vector(), da.to_double_vector()) <= 1e-5);
  // Evaluation uses the running statistics either way.
  const auto ea = plain.forward(x, models::Mode::Eval).y.to_double_vector();
  const auto eb = alone.forward(x, models::Mode::Eval).y.to_double_vector();
  BOOST_TEST(worst_relative(eb, ea) <= 1e-5);
}

BOOST_AUTO_TEST_SUITE_END()
