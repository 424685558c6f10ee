// The step-by-step API (pipewright/job.h) and the pure job plan: a program's model with its
// embedding table on parameter servers trains as with the table local; a plan starts nothing and
// writes nothing; batches and configs that cannot work are one-line errors.
#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include <boost/test/unit_test.hpp>

#include "pipewright/pipewright.h"
#include "train/job_plan.h"

using namespace pw;
namespace fs = std::filesystem;
namespace L = pw::layers;

namespace {

constexpr int kBag = 3;
constexpr std::int64_t kRows = 40, kBatch = 16;

partition::ModelDescription click_model(L::TablePlacement placement) {
  partition::ModelDescription m;
  m.name = "bag-mlp";
  m.sample_shape = {1, 1, kBag};   // the data set's C x H x W; flattened to the bag's ids
  m.num_classes = 2;
  m.layers = {L::flatten("ids"), L::embedding_bag("emb", kRows, 6, {kBag, L::BagMode::Mean, placement}), L::linear("fc1", 6, 8),
              L::relu("relu"), L::linear("fc2", 8, 2)};
  return m;
}

train::JobConfig click_job(L::TablePlacement placement, int stages, int replicas, int servers) {
  train::JobConfig c;
  c.program_model = click_model(placement);
  c.program_model->split_points = stages > 1 ? std::vector<int>{2} : std::vector<int>{};
  c.data.dataset = "synthetic";
  c.data.synthetic_shape = {1, 1, kBag};
  c.data.batch_size = kBatch;
  c.pipeline.micro_batches = 2;
  c.replicas.replicas = replicas;
  c.optimizer.kind = models::OptimizerKind::Sgd;
  c.optimizer.lr = 0.05;
  c.optimizer.momentum = 0.0;   // the servers' sparse SGD has none
  c.ps.servers = servers;
  c.ps.optimizer = dp::SparseOptimizerKind::Sgd;
  c.resources.threads = 1;
  c.seed = 3;
  c.timeouts.stage_seconds = 30;
  return c;
}

struct Batch {
  std::vector<float> ids;
  std::vector<std::int64_t> labels;
  train::BatchView view() const { return {kBatch, ids, labels}; }
};

Batch batch(std::int64_t step) {
  std::mt19937_64 rng(static_cast<std::uint64_t>(step + 17));
  std::uniform_int_distribution<std::int64_t> id(0, kRows - 1);
  Batch b;
  for (std::int64_t i = 0; i < kBatch; ++i) {
    int low = 0;   // ids in the table's lower half: the label is whether most are
    for (int k = 0; k < kBag; ++k) {
      const auto v = id(rng);
      low += v < kRows / 2 ? 1 : 0;
      b.ids.push_back(static_cast<float>(v));
    }
    b.labels.push_back(2 * low > kBag ? 1 : 0);
  }
  return b;
}

std::vector<double> train_losses(const train::JobConfig& c, int steps) {
  train::Job job(c);
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) losses.push_back(job.step(batch(s).view()).loss);
  return losses;
}

template <typename E>
std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(job_api)

// The servers' sparse SGD applies the replicas' mean row gradients, as the local table's dense SGD
// applies the mean gradient: the same trajectory up to the order of float additions (the servers
// add the two replicas' halves one after the other).
BOOST_AUTO_TEST_CASE(a_program_table_on_parameter_servers_trains_like_the_local_table) {
  const int steps = 12;
  const auto local = train_losses(click_job(L::TablePlacement::Local, 2, 2, 0), steps);
  const auto served = train_losses(click_job(L::TablePlacement::ParameterServers, 2, 2, 2), steps);
  BOOST_REQUIRE_EQUAL(local.size(), served.size());
  for (int s = 0; s < steps; ++s)
    BOOST_TEST(std::abs(local[s] - served[s]) <= 1e-5 * std::abs(local[s]), "step " << s << ": " << local[s] << " vs " << served[s]);
  BOOST_TEST(local.back() < local.front());
}

BOOST_AUTO_TEST_CASE(the_job_feeds_both_parts_embedded_and_checks_the_batch) {
  train::Job job(click_job(L::TablePlacement::Local, 2, 1, 0));
  BOOST_TEST((job.feeds() == train::Feeds::InputsAndLabels));
  BOOST_TEST(job.is_primary());
  BOOST_TEST(job.world_size() == 2);
  auto b = batch(0);
  b.labels.pop_back();
  BOOST_TEST(message_of<InputError>([&] { job.step(b.view()); }).find("labels for 16 samples") != std::string::npos);
  b = batch(0);
  train::BatchView fewer = b.view();
  fewer.samples = 8;
  BOOST_TEST(message_of<InputError>([&] { job.step(fewer); }).find("the job's batch size is 16") != std::string::npos);
  // A refused batch never reached the ranks: the job goes on.
  const double first = job.step(batch(0).view()).loss;
  BOOST_TEST(std::isfinite(first));
}

BOOST_AUTO_TEST_CASE(server_tables_and_servers_need_each_other) {
  const auto no_servers = message_of<train::ConfigError>(
      [] { train::plan_job(click_job(L::TablePlacement::ParameterServers, 1, 1, 0)); });
  BOOST_TEST(no_servers.find("/ps/servers") != std::string::npos, no_servers);
  BOOST_TEST(no_servers.find("'emb'") != std::string::npos, no_servers);
  const auto no_tables =
      message_of<train::ConfigError>([] { train::plan_job(click_job(L::TablePlacement::Local, 1, 1, 2)); });
  BOOST_TEST(no_tables.find("keeps none on them") != std::string::npos, no_tables);
}

BOOST_AUTO_TEST_CASE(a_plan_is_a_value_that_starts_nothing_and_writes_nothing) {
  const auto dir = fs::temp_directory_path() / ("pw_plan_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  auto c = click_job(L::TablePlacement::ParameterServers, 2, 2, 2);
  c.checkpoints.dir = (dir / "checkpoints").string();
  c.checkpoints.every_steps = 1;
  const auto plan = train::plan_job(c);
  BOOST_TEST(!fs::exists(dir));   // the session makes the folder, not the plan
  BOOST_TEST(plan.server_tables == std::vector<std::string>{"emb"});
  const auto copy = plan;
  BOOST_TEST((copy == plan));
  BOOST_TEST((train::plan_job(c) == plan));
  auto other = c;
  other.optimizer.lr = 0.3;
  BOOST_TEST(!(train::plan_job(other) == plan));
  other = c;
  other.program_model->split_points = {};
  BOOST_TEST(!(train::plan_job(other) == plan));
  other = c;
  other.program_model->tied = {{"both", {"fc1.weight", "fc2.weight"}}};
  BOOST_TEST(!(train::plan_job(other) == plan));
  other = c;
  other.program_model->loss_name = "my-loss";
  BOOST_TEST(!(train::plan_job(other) == plan));
}

BOOST_AUTO_TEST_CASE(a_step_driven_job_refuses_checkpoint_settings_it_would_ignore) {
  auto c = click_job(L::TablePlacement::Local, 1, 1, 0);
  c.checkpoints.dir = "/tmp/never-made";
  const auto why = message_of<train::ConfigError>([&] { train::Job job(c); });
  BOOST_TEST(why.find("/checkpoints/dir") != std::string::npos, why);
}

BOOST_AUTO_TEST_SUITE_END()
