// JobConfig: its JSON form round-trips, its hash tells jobs apart, and the first differing field
// is named; resources (where a rank runs) are not part of the job's identity.
#include <boost/test/unit_test.hpp>

#include "core/error.h"
#include "train/job_config.h"

using namespace pw;

BOOST_AUTO_TEST_SUITE(job_config)

BOOST_AUTO_TEST_CASE(json_round_trips_and_hashes_what_defines_the_job) {
  train::JobConfig c;
  c.model.name = "resnet18";
  c.pipeline.stages = 4;
  c.pipeline.split = {3, 7, 12};
  c.replicas.replicas = 2;
  c.optimizer.lr = 0.05;
  c.seed = 9;
  const auto j = train::to_json(c);
  const auto back = train::job_config_from_json(j);
  BOOST_TEST(train::to_json(back) == j);
  BOOST_TEST(train::config_hash(j) == train::config_hash(train::to_json(back)));
  BOOST_TEST(train::config_hash(j).size() == 16u);

  auto other = c;
  other.pipeline.micro_batches = 8;
  BOOST_TEST(train::config_hash(train::to_json(other)) != train::config_hash(j));
  BOOST_TEST(train::first_difference(j, train::to_json(other)) == "/pipeline/micro_batches: 0 here, 8 there");
  BOOST_TEST(train::first_difference(j, j).empty());

  // The CUDA numerics are part of the job: ranks must agree on them.
  auto tf32 = c;
  tf32.numerics.allow_tf32 = true;
  tf32.numerics.deterministic = true;
  const auto tf32_json = train::to_json(tf32);
  BOOST_TEST(train::first_difference(j, tf32_json) == "/numerics/allow_tf32: false here, true there");
  BOOST_TEST(train::job_config_from_json(tf32_json).numerics.deterministic);

  // Where a rank runs is its own business.
  auto elsewhere = c;
  elsewhere.resources.device = "cuda:1";
  elsewhere.resources.threads = 7;
  elsewhere.resources.data_dir = "/mnt/data";
  BOOST_TEST(train::config_hash(train::to_json(elsewhere)) == train::config_hash(j));
}

BOOST_AUTO_TEST_CASE(a_programs_model_is_part_of_the_identity_by_its_names) {
  train::JobConfig c;
  partition::ModelDescription m;
  m.name = "mine";
  m.layers = {{"conv1", nullptr}, {"fc", nullptr}};
  m.split_points = {1};
  c.program_model = m;
  const auto j = train::to_json(c);
  BOOST_TEST(j["program_model"]["layers"] == nlohmann::json({"conv1", "fc"}));
  auto renamed = c;
  renamed.program_model->layers[1].name = "fc2";
  BOOST_TEST(train::first_difference(j, train::to_json(renamed)) == "/program_model/layers/1: \"fc\" here, \"fc2\" there");
  BOOST_CHECK_THROW(train::job_config_from_json(j), InputError);
}

BOOST_AUTO_TEST_CASE(a_checkpoint_of_a_program_model_resumes_under_another_split) {
  train::JobConfig c;
  partition::ModelDescription m;
  m.name = "mine";
  m.layers = {{"conv1", nullptr}, {"conv2", nullptr}, {"fc", nullptr}};
  m.split_points = {1};
  c.program_model = m;
  auto resplit = c;
  resplit.program_model->split_points = {2};
  // Ranks of one job still agree on the split; a checkpoint does not care.
  BOOST_TEST(train::first_difference(train::to_json(c), train::to_json(resplit)) == "/program_model/split_points/0: 1 here, 2 there");
  BOOST_TEST(train::resume_difference(train::to_json(c), train::to_json(resplit)) == "");
  resplit.program_model->split_points = {};
  BOOST_TEST(train::resume_difference(train::to_json(c), train::to_json(resplit)) == "");
  auto renamed = c;
  renamed.program_model->layers[2].name = "head";
  BOOST_TEST(train::resume_difference(train::to_json(c), train::to_json(renamed)) ==
             "/program_model/layers/2: \"fc\" in the checkpoint, \"head\" now");
}

BOOST_AUTO_TEST_CASE(bad_json_is_an_input_error_naming_the_field) {
  nlohmann::json j = {{"pipeline", {{"stages", "four"}}}};
  try {
    train::job_config_from_json(j);
    BOOST_FAIL("expected an error");
  } catch (const InputError& e) {
    BOOST_TEST(std::string(e.what()).find("job config") != std::string::npos, e.what());
  }
}

BOOST_AUTO_TEST_SUITE_END()
