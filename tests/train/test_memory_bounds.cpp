// check_host_memory: a synthetic set or a batch that could never fit this host is refused before
// anything is allocated, naming the field, what it needs and the largest value that fits; what
// fits passes.
#include <string>

#include <boost/test/unit_test.hpp>

#include "train/job_plan.h"
#include "train/memory_bounds.h"

using namespace pw;

namespace {
constexpr std::int64_t kGiB = std::int64_t{1} << 30;

train::JobConfig synthetic_job(std::int64_t size, std::int64_t batch) {
  train::JobConfig c;
  c.model.name = "seed-cnn";
  c.data.dataset = "synthetic";
  c.data.synthetic_size = size;
  c.data.batch_size = batch;
  return c;
}

std::string refusal(const train::JobPlan& plan, std::int64_t host_bytes) {
  try {
    train::check_host_memory(plan, host_bytes);
  } catch (const train::ConfigError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

BOOST_AUTO_TEST_SUITE(memory_bounds)

BOOST_AUTO_TEST_CASE(a_synthetic_set_larger_than_the_host_can_order_is_refused) {
  const auto plan = train::plan_job(synthetic_job(512, 16));
  auto huge = plan;
  huge.config.data.synthetic_size = 2 * kGiB / 16 + 1;   // 16 bytes per sample of order on a 2 GiB host
  const std::string message = refusal(huge, 2 * kGiB);
  BOOST_TEST_INFO(message);
  BOOST_TEST(message.find("/data/synthetic_size") != std::string::npos);
  BOOST_TEST(message.find("at most " + std::to_string(2 * kGiB / 16) + " fit") != std::string::npos);
  BOOST_TEST(message.find('\n') == std::string::npos);
  huge.config.data.synthetic_size = 2 * kGiB / 16;
  BOOST_TEST(refusal(huge, 2 * kGiB).empty());
}

BOOST_AUTO_TEST_CASE(a_micro_batch_whose_activations_exceed_the_host_is_refused_and_stages_share_them) {
  const auto plan = train::plan_job(synthetic_job(512, 16));
  const std::int64_t per_sample = plan.stats.activation_bytes_per_sample;
  BOOST_REQUIRE(per_sample > 0);
  const std::int64_t host = 1000 * per_sample;
  auto big = plan;
  big.config.data.batch_size = 1001;
  const std::string message = refusal(big, host);
  BOOST_TEST_INFO(message);
  BOOST_TEST(message.find("/data/batch_size") != std::string::npos);
  BOOST_TEST(message.find("at most 1000 samples per micro-batch fit") != std::string::npos);
  big.config.data.batch_size = 1000;
  BOOST_TEST(refusal(big, host).empty());

  // Two stages each hold about half of a micro-batch's activations; four micro-batches halve it again.
  auto split = train::plan_job([] {
    auto c = synthetic_job(8192, 2000);
    c.pipeline.stages = 2;
    c.pipeline.micro_batches = 2;
    return c;
  }());
  BOOST_TEST(refusal(split, host).empty());   // micro-batches of 1000
  split.config.data.batch_size = 4004;
  BOOST_TEST(refusal(split, host).find("the busiest of 2 stages") != std::string::npos);
  split.schedule.micro_batches = 4;
  BOOST_TEST(refusal(split, host).empty());
}

BOOST_AUTO_TEST_CASE(an_unknown_host_size_checks_nothing) {
  auto plan = train::plan_job(synthetic_job(512, 16));
  plan.config.data.synthetic_size = std::int64_t{1} << 60;
  BOOST_TEST(refusal(plan, 0).empty());
}

BOOST_AUTO_TEST_SUITE_END()
