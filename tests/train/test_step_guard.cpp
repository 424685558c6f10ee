// Clipping by the norm of the whole model (train/step_guard.h) when embedding rows live on
// parameter servers: the rows count in the norm as the servers apply them, so 1 replica and 2
// replicas of the same global batch see the same norm at every step and train the same weights;
// without clipping, 2 replicas leave the rows out of the reported norm (their sum over the replicas
// is not formed). DLRM on synthetic clicks, 2 servers run as threads, SGD.
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "kernels/safetensors.h"
#include "pipewright/fit.h"
#include "tests/tools/cli_runner.h"
#include "train/job_config.h"

namespace {

using pw::train::JobConfig;

constexpr int kSteps = 6;

JobConfig dlrm(int replicas, double clip) {
  JobConfig c;
  c.model.name = "dlrm";
  c.data.dataset = "synthetic-clicks";
  c.data.synthetic_size = 2000;
  c.data.batch_size = 64;
  c.data.steps = kSteps;
  c.data.eval_batches = 1;
  c.replicas.replicas = replicas;
  c.ps.servers = 2;
  c.optimizer.kind = pw::models::OptimizerKind::Sgd;
  c.optimizer.lr = 0.5;
  c.optimizer.momentum = 0.0;
  c.recovery.clip_grad_norm = clip;
  c.resources.threads = 1;
  c.seed = 11;
  return c;
}

// Every step's gradient norm; the trained weights go to `save`.
std::vector<double> norms_of(const JobConfig& c, const std::string& save) {
  pw::train::FitOptions o;
  o.save_path = save;
  o.progress = false;
  std::vector<double> norms;
  pw::train::FitCallbacks callbacks;
  callbacks.on_step = [&](const pw::train::StepEvent& e) { norms.push_back(e.outcome->gradient_norm); };
  pw::train::run_job(c, o, callbacks);
  return norms;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(step_guard)

BOOST_AUTO_TEST_CASE(rows_on_parameter_servers_count_in_the_clipping_norm_with_any_replica_count) {
  pw::test::ScratchDir dir("clip_ps");
  const double clip = 0.01;
  const auto one = norms_of(dlrm(1, clip), dir.file("one.safetensors"));
  const auto two = norms_of(dlrm(2, clip), dir.file("two.safetensors"));
  BOOST_REQUIRE_EQUAL(one.size(), static_cast<std::size_t>(kSteps));
  BOOST_REQUIRE_EQUAL(two.size(), one.size());
  for (std::size_t s = 0; s < one.size(); ++s) {
    BOOST_TEST(one[s] > clip, "step " << s + 1 << ": clipping must be active (norm " << one[s] << ")");
    BOOST_TEST(std::abs(two[s] - one[s]) <= 1e-6 * one[s], "step " << s + 1 << ": " << two[s] << " vs " << one[s]);
  }
  // Same parameters, to 1e-6 of the largest value of each tensor.
  const auto a = pw::kernels::load_safetensors(dir.file("one.safetensors"));
  const auto b = pw::kernels::load_safetensors(dir.file("two.safetensors"));
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  for (const auto& [name, x] : a) {
    const auto xs = x.to_double_vector();
    const auto ys = b.at(name).to_double_vector();
    BOOST_REQUIRE_EQUAL(xs.size(), ys.size());
    double largest = 0.0, worst = 0.0;
    for (std::size_t i = 0; i < xs.size(); ++i) {
      largest = std::max(largest, std::abs(xs[i]));
      worst = std::max(worst, std::abs(xs[i] - ys[i]));
    }
    BOOST_TEST(worst <= 1e-6 * std::max(largest, 1e-3), name << ": differs by " << worst << " (largest " << largest << ")");
  }
  // Without clipping, 2 replicas leave the rows out: the first step's norm (same weights) is below
  // the whole model's.
  const auto unclipped = norms_of(dlrm(2, 0.0), dir.file("unclipped.safetensors"));
  BOOST_TEST(unclipped.front() < one.front() * (1.0 - 1e-3), unclipped.front() << " vs " << one.front());
}

BOOST_AUTO_TEST_SUITE_END()
