// `pipewright train --model dlrm --dataset synthetic-clicks`: binary cross-entropy end to end,
// test AUC in the summary, and the same run as a two-stage pipeline.
#include <cmath>
#include <fstream>

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "tests/tools/cli_runner.h"

using pw::test::run_pipewright;
using pw::test::ScratchDir;

BOOST_AUTO_TEST_SUITE(train_dlrm)

BOOST_AUTO_TEST_CASE(dlrm_learns_the_clicks_on_one_device_and_as_a_pipeline) {
  ScratchDir dir("dlrm");
  const std::string args = "train --model dlrm --dataset synthetic-clicks --synthetic-size 20000 --steps 300 "
                           "--batch-size 64 --threads 1 --summary ";
  auto r = run_pipewright(args + dir.file("one.json"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  r = run_pipewright(args + dir.file("two.json") + " --stages 2 --micro-batches 2");
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  const auto one = nlohmann::json::parse(std::ifstream(dir.file("one.json")));
  const auto two = nlohmann::json::parse(std::ifstream(dir.file("two.json")));
  BOOST_TEST(one["test_auc"].get<double>() > 0.70, one.dump());   // the generating model reaches about 0.80
  BOOST_TEST(std::abs(one["test_auc"].get<double>() - two["test_auc"].get<double>()) <= 1e-4);
  BOOST_TEST(std::abs(one["final_loss"].get<double>() - two["final_loss"].get<double>()) <= 1e-5);
}

BOOST_AUTO_TEST_CASE(synthetic_size_sets_the_click_data_and_dlrm_names_its_data_set) {
  ScratchDir dir("dlrm_size");
  // One epoch of 640 samples in batches of 64 is 10 steps (the default would be 60,000 samples).
  auto r = run_pipewright("train --model dlrm --dataset synthetic-clicks --synthetic-size 640 --epochs 1 "
                          "--batch-size 64 --threads 1 --summary " + dir.file("s.json"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  const auto s = nlohmann::json::parse(std::ifstream(dir.file("s.json")));
  BOOST_TEST(s["steps"].get<int>() == 10, s.dump());

  r = run_pipewright("train --model dlrm --steps 2 --summary " + dir.file("refused.json"));
  BOOST_TEST(r.status != 0);
  BOOST_TEST(r.output.find("--model dlrm reads click data; use --dataset synthetic-clicks (got fashion-mnist)") !=
                 std::string::npos,
             r.output);
  BOOST_TEST(!std::ifstream(dir.file("refused.json")).good());
}

BOOST_AUTO_TEST_SUITE_END()
