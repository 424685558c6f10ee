// The pre-start size check of a model (issue 49): the zoo counts every layer's parameters without
// building it, and the count is the built layer's; a job whose weights, gradients and optimizer
// state could never fit this host (dlrm with 16,000 tables, resnet18 at width 4096) is refused by
// plan_job in one line naming the field, what it needs and what the host has, before any layer is
// built. The cases that used to allocate tens of GiB run under a 4 GiB address-space limit, so a
// regression fails (out of memory) instead of taking the machine.
#include <sys/resource.h>

#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include "core/units.h"
#include "models/zoo/model_spec.h"
#include "partition/model_description.h"
#include "train/job_plan.h"
#include "train/memory_bounds.h"

using namespace pw;

namespace {
constexpr std::int64_t kMiB = std::int64_t{1} << 20;
constexpr std::int64_t kGiB = std::int64_t{1} << 30;

models::ModelOptions options(std::vector<std::int64_t> shape, int width, int classes = 10) {
  models::ModelOptions o;
  o.sample_shape = std::move(shape);
  o.width = width;
  o.num_classes = classes;
  return o;
}

// Every layer's count against the layer built from it.
void check_counts(const models::ModelSpec& spec) {
  for (const auto& layer : spec.layers) {
    BOOST_TEST_CONTEXT(spec.name << " " << layer.name) {
      BOOST_TEST(layer.parameters >= 0);
      BOOST_TEST(layer.parameters == layer.build()->parameter_count());
    }
  }
}

train::JobConfig synthetic_job(const std::string& model, int width, std::vector<std::int64_t> shape) {
  train::JobConfig c;
  c.model.name = model;
  c.model.width = width;
  c.data.dataset = "synthetic";
  c.data.synthetic_shape = std::move(shape);
  c.data.synthetic_size = 64;
  c.data.batch_size = 8;
  return c;
}

train::JobConfig dlrm_job(std::size_t tables, std::int64_t rows) {
  train::JobConfig c;
  c.model.name = "dlrm";
  c.model.embedding_rows.assign(tables, rows);
  c.data.dataset = "synthetic-clicks";
  c.data.synthetic_size = 64;
  c.data.batch_size = 8;
  return c;
}

std::string refusal(const train::JobPlan& plan, std::int64_t host_bytes) {
  try {
    train::check_model_memory(plan, train::physical_memory(host_bytes));
  } catch (const train::ConfigError& e) {
    return e.what();
  }
  return "";
}

// The ConfigError plan_job throws ("" if none), under an address-space limit of `limit` bytes: a
// check that came after the layers were built would make this an out-of-memory error instead.
std::pair<std::string, std::string> plan_under_limit(const train::JobConfig& c, std::int64_t limit) {
  rlimit before{};
  BOOST_REQUIRE(getrlimit(RLIMIT_AS, &before) == 0);
  rlimit capped = before;
  if (before.rlim_cur == RLIM_INFINITY || static_cast<std::int64_t>(before.rlim_cur) > limit)
    capped.rlim_cur = static_cast<rlim_t>(limit);
  BOOST_REQUIRE(setrlimit(RLIMIT_AS, &capped) == 0);
  std::pair<std::string, std::string> out;
  try {
    train::plan_job(c);
  } catch (const train::ConfigError& e) {
    out = {e.path(), e.what()};
  } catch (const std::exception& e) {
    out = {"(not a ConfigError)", e.what()};
  }
  setrlimit(RLIMIT_AS, &before);
  return out;
}
}  // namespace

BOOST_AUTO_TEST_SUITE(prestart_size)

BOOST_AUTO_TEST_CASE(the_zoos_counts_are_the_built_layers_counts) {
  check_counts(models::make_model_spec("seed-cnn", options({1, 28, 28}, 64)));
  check_counts(models::make_model_spec("seed-cnn", options({3, 40, 36}, 64)));
  for (const char* name : {"resnet18", "resnet34", "resnet50", "resnet101", "resnet152"}) {
    check_counts(models::make_model_spec(name, options({3, 32, 32}, 4)));   // small form
    check_counts(models::make_model_spec(name, options({3, 72, 72}, 2)));   // ImageNet form
  }
  check_counts(models::make_model_spec("vgg16", options({3, 32, 32}, 8)));
  check_counts(models::make_model_spec("vgg16", options({3, 72, 72}, 4, 5)));
  check_counts(models::make_model_spec("vgg16", options({1, 28, 28}, 1)));   // widths round up to 1

  models::ModelOptions dlrm;
  dlrm.clicks.dense = 5;
  dlrm.clicks.table_sizes = {7, 100, 33, 1};
  dlrm.embedding_dim = 6;
  dlrm.bottom_mlp = {12, 9};
  dlrm.top_mlp = {10, 4};
  check_counts(models::make_model_spec("dlrm", dlrm));
  const auto local = models::make_model_spec("dlrm", dlrm);
  dlrm.embedding_tables = models::TablePlacement::ParameterServers;   // the tables are not the layer's
  const auto served = models::make_model_spec("dlrm", dlrm);
  check_counts(served);
  BOOST_TEST(local.layers[0].parameters - served.layers[0].parameters == (7 + 100 + 33 + 1) * 6);

  // A zoo model described for a program keeps its counts.
  pw::partition::ZooOptions zoo;
  zoo.width = 4;
  const auto described = pw::partition::describe_zoo_model("resnet18", zoo);
  BOOST_TEST(models::parameter_count_of(described.layers) ==
             models::parameter_count_of(models::make_model_spec("resnet18", options({1, 28, 28}, 4)).layers));
}

// Reference counts: sum(p.numel() for p in torchvision.models.<name>().parameters()), counted
// without building a layer.
BOOST_AUTO_TEST_CASE(imagenet_counts_match_torchvision_without_building) {
  const std::vector<std::pair<std::string, std::int64_t>> expected = {
      {"resnet18", 11689512}, {"resnet34", 21797672}, {"resnet50", 25557032}, {"resnet101", 44549160},
      {"resnet152", 60192808}, {"vgg16", 138357544}};
  for (const auto& [name, count] : expected)
    BOOST_TEST_CONTEXT(name) {
      BOOST_TEST(models::parameter_count_of(models::make_model_spec(name, options({3, 224, 224}, 64, 1000)).layers) ==
                 count);
    }
}

BOOST_AUTO_TEST_CASE(dlrms_interaction_is_counted_in_int64_and_bounded) {
  BOOST_TEST(models::dlrm_interaction_width(16001, 8) == 8 + std::int64_t{16001} * 16000 / 2);
  BOOST_TEST(models::dlrm_interaction_width(100001, 8) == 8 + std::int64_t{100001} * 100000 / 2);   // past int
  try {
    train::plan_job(dlrm_job(models::kMaxDlrmTables + 1, 10));
    BOOST_FAIL("too many tables were taken");
  } catch (const train::ConfigError& e) {
    BOOST_TEST(e.path() == "/model/embedding_rows");
    BOOST_TEST(std::string(e.what()).find("at most " + std::to_string(models::kMaxDlrmTables)) != std::string::npos,
               e.what());
  }
}

BOOST_AUTO_TEST_CASE(weights_gradients_and_optimizer_state_over_the_host_are_refused) {
  const auto plan = train::plan_job(synthetic_job("resnet18", 64, {3, 32, 32}));
  const std::int64_t params = models::parameter_count_of(plan.model.layers);
  BOOST_TEST(params == plan.stats.parameters);   // the count is the built model's
  // SGD in fp32: weight, gradient and momentum, 12 bytes a parameter on the one stage.
  auto sgd = plan;
  sgd.optimizer.kind = models::OptimizerKind::Sgd;
  const std::int64_t needed = params * 12;
  const std::string message = refusal(sgd, needed - 1);
  BOOST_TEST_INFO(message);
  BOOST_TEST(message.rfind("/model/width: 64: resnet18 has ", 0) == 0u);
  BOOST_TEST(message.find("needs at least " + format_bytes(needed)) != std::string::npos);
  BOOST_TEST(message.find("more than this host's " + format_bytes(needed - 1) + " of memory") != std::string::npos);
  BOOST_TEST(message.find('\n') == std::string::npos);
  BOOST_TEST(refusal(sgd, needed).empty());

  // Adam (the default) keeps two tensors of state; sharded over 2 replicas, each keeps half of them.
  auto adam = plan;
  BOOST_TEST(!refusal(adam, params * 16 - 1).empty());
  BOOST_TEST(refusal(adam, params * 16).empty());
  adam.config.replicas.replicas = 2;
  adam.config.replicas.optimizer_state = dp::OptimizerState::Sharded;
  BOOST_TEST(refusal(adam, params * 12).empty());
  BOOST_TEST(!refusal(adam, params * 12 - 1).empty());
  // Under bf16 a weight's value may be its 16-bit copy: 2 bytes are certain.
  auto bf16 = plan;
  bf16.precision = models::Precision::Bf16;
  BOOST_TEST(refusal(bf16, params * 14).empty());
  BOOST_TEST(!refusal(bf16, params * 14 - 1).empty());

  // Over two stages the busiest holds at least half of the weights, and at least its largest layer.
  auto two = train::plan_job([] {
    auto c = synthetic_job("resnet18", 64, {3, 32, 32});
    c.pipeline.stages = 2;
    return c;
  }());
  const std::string split = refusal(two, params * 8 - 1000);
  BOOST_TEST(split.find("the busiest of 2 stages holds at least") != std::string::npos, split);
  BOOST_TEST(refusal(two, params * 8 + 1000).empty());

  // The seed CNN's size follows its input's, and the message names that.
  const auto cnn = train::plan_job(synthetic_job("seed-cnn", 64, {1, 28, 28}));
  BOOST_TEST(refusal(cnn, 64 * 1024).rfind("/data/synthetic_shape: 1x28x28: seed-cnn has", 0) == 0u,
             refusal(cnn, 64 * 1024));
  // An unknown host checks nothing.
  BOOST_TEST(refusal(plan, 0).empty());
}

BOOST_AUTO_TEST_CASE(dlrm_with_16000_tables_is_refused_before_anything_is_built) {
  // Its interaction is 128 M values wide, so its top MLP's first layer alone has 2 billion weights
  // (about 33 GiB with gradients and Adam's state): it used to be built here and eat the machine.
  const auto [path, message] = plan_under_limit(dlrm_job(16000, 1000), 4 * kGiB);
  BOOST_TEST_INFO(message);
  BOOST_TEST(path == "/model/embedding_rows");
  BOOST_TEST(message.find("16000 tables of 16000000 rows in all") != std::string::npos);
  BOOST_TEST(message.find("is 128008008 values wide") != std::string::npos);
  BOOST_TEST(message.find("needs at least") != std::string::npos);
  BOOST_TEST(message.find("more than the ") != std::string::npos);   // the limit, lower than any host here
  BOOST_TEST(message.find('\n') == std::string::npos);
}

BOOST_AUTO_TEST_CASE(resnet18_at_width_4096_is_refused_before_anything_is_built) {
  const auto [path, message] = plan_under_limit(synthetic_job("resnet18", 4096, {3, 32, 32}), 4 * kGiB);
  BOOST_TEST_INFO(message);
  BOOST_TEST(path == "/model/width");
  BOOST_TEST(message.find("4096: resnet18 has 45.") != std::string::npos);   // 45.8 billion parameters
  BOOST_TEST(message.find("its one stage needs at least") != std::string::npos);
  // What fits still plans under the same limit.
  BOOST_TEST(plan_under_limit(synthetic_job("resnet18", 16, {3, 32, 32}), 4 * kGiB).second.empty());
}

BOOST_AUTO_TEST_CASE(the_limit_is_the_lowest_of_the_host_and_this_processs_limits) {
  const auto physical = train::physical_memory(8 * kGiB);
  BOOST_TEST(physical.bytes == 8 * kGiB);
  BOOST_TEST(physical.what == "this host's " + format_bytes(8 * kGiB) + " of memory");
  BOOST_TEST(train::physical_memory(0).bytes == 0);
  rlimit before{};
  BOOST_REQUIRE(getrlimit(RLIMIT_AS, &before) == 0);
  if (before.rlim_cur != RLIM_INFINITY && static_cast<std::int64_t>(before.rlim_cur) < 64 * kGiB) return;
  rlimit capped = before;
  capped.rlim_cur = static_cast<rlim_t>(64 * kGiB);
  BOOST_REQUIRE(setrlimit(RLIMIT_AS, &capped) == 0);
  const auto limited = train::host_memory_limit(1024 * kGiB);
  setrlimit(RLIMIT_AS, &before);
  BOOST_TEST(limited.bytes <= 64 * kGiB);
  BOOST_TEST(train::host_memory_limit(1 * kMiB).bytes <= 1 * kMiB);   // the host when it is lower
}

BOOST_AUTO_TEST_SUITE_END()
