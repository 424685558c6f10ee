// A program's own loss (pipewright/loss.h) trains through the engine: softmax cross-entropy written
// by the program gives the built-in's losses over a pipeline of two stages; label smoothing moves
// them; a loss that returns a gradient of the wrong size is a one-line error; the loss's name is
// part of the job's identity.
#include <atomic>
#include <cmath>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "core/error.h"
#include "pipewright/fit.h"
#include "tests/train/job_test_util.h"
#include "train/job_config.h"

using namespace pw;

namespace {

// Softmax cross-entropy with label smoothing `eps` (eps = 0: the plain loss), in double.
models::LossFunction smoothed_cross_entropy(double eps, std::atomic<int>* calls) {
  return [eps, calls](const models::LossInput& in) {
    if (calls != nullptr) ++*calls;
    const auto n = in.shape[0], c = in.shape[1];
    models::LossValue v;
    v.grad.resize(static_cast<std::size_t>(n * c));
    for (std::int64_t i = 0; i < n; ++i) {
      const float* z = in.outputs + i * c;
      double top = z[0];
      std::int64_t arg = 0;
      for (std::int64_t k = 1; k < c; ++k)
        if (z[k] > top) top = z[k], arg = k;
      double sum = 0.0;
      for (std::int64_t k = 0; k < c; ++k) sum += std::exp(z[k] - top);
      const double log_sum = std::log(sum) + top;
      for (std::int64_t k = 0; k < c; ++k) {
        const double target = (k == in.labels[i] ? 1.0 - eps : 0.0) + eps / static_cast<double>(c);
        v.loss -= target * (z[k] - log_sum) / static_cast<double>(n);
        v.grad[static_cast<std::size_t>(i * c + k)] =
            static_cast<float>((std::exp(z[k] - log_sum) - target) / static_cast<double>(n));
      }
      if (arg == in.labels[i]) ++v.correct;
    }
    return v;
  };
}

using test::step_losses;

train::JobConfig two_stage_job(const partition::ModelDescription& model) {
  test::JobShape shape;
  shape.stages = 2;
  shape.micro_batches = 2;
  shape.split = {4};
  auto job = test::job_of(model, shape, 16);
  job.data.steps = 4;
  job.data.eval_batches = 1;
  return job;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(program_loss)

BOOST_AUTO_TEST_CASE(a_programs_cross_entropy_trains_as_the_built_in_one) {
  const auto reference = step_losses(two_stage_job(test::tied_mlp()));
  auto model = test::tied_mlp();
  std::atomic<int> calls{0};
  model.loss = smoothed_cross_entropy(0.0, &calls);
  model.loss_name = "cross-entropy";
  const auto mine = step_losses(two_stage_job(model));
  BOOST_REQUIRE(mine.size() == reference.size());
  for (std::size_t i = 0; i < mine.size(); ++i) BOOST_TEST(mine[i] == reference[i], boost::test_tools::tolerance(1e-5));
  BOOST_TEST(calls.load() >= 4 * 2);   // every micro-batch of every step, and the evaluation
  // Smoothing changes the objective: the same first outputs give another loss, and the steps after
  // follow other gradients.
  model.loss = smoothed_cross_entropy(0.3, nullptr);
  const auto smoothed = step_losses(two_stage_job(model));
  BOOST_REQUIRE(smoothed.size() == reference.size());
  for (std::size_t i = 0; i < smoothed.size(); ++i) BOOST_TEST(std::abs(smoothed[i] - reference[i]) > 1e-3);
}

BOOST_AUTO_TEST_CASE(a_loss_with_a_gradient_of_the_wrong_size_is_a_one_line_error) {
  auto model = test::tied_mlp();
  model.loss = [](const models::LossInput& in) {
    return models::LossValue{1.0, 0, std::vector<float>(static_cast<std::size_t>(in.shape[0]), 0.0f)};
  };
  try {
    step_losses(two_stage_job(model));
    BOOST_FAIL("expected an error");
  } catch (const InputError& e) {
    BOOST_TEST(std::string(e.what()).find("the program's loss returned 8 gradient values for outputs of shape [8, 10]; "
                                          "expected 80") != std::string::npos,
               e.what());
  }
}

BOOST_AUTO_TEST_CASE(the_losss_name_is_part_of_the_identity) {
  auto model = test::tied_mlp();
  const auto plain = train::to_json(two_stage_job(model));
  BOOST_TEST(!plain["program_model"].contains("loss"));
  model.loss = smoothed_cross_entropy(0.1, nullptr);
  BOOST_TEST(train::to_json(two_stage_job(model))["program_model"]["loss"] == "program");
  model.loss_name = "smoothing-0.1";
  BOOST_TEST(train::resume_difference(plain, train::to_json(two_stage_job(model))) ==
             "/program_model/loss: absent in the checkpoint, \"smoothing-0.1\" now");
}

// Servers hold embedding tables; a program model with none on them is refused, not trained
// beside servers nobody uses (tests/train/test_job.cpp trains one that has such a table).
BOOST_AUTO_TEST_CASE(a_program_model_without_server_tables_is_refused_servers) {
  auto job = two_stage_job(test::tied_mlp());
  job.ps.servers = 2;
  BOOST_CHECK_EXCEPTION(step_losses(job), train::ConfigError, [](const train::ConfigError& e) {
    return std::string(e.what()).find("/ps/servers") != std::string::npos &&
           std::string(e.what()).find("model tied-mlp keeps none on them") != std::string::npos;
  });
}

BOOST_AUTO_TEST_SUITE_END()
