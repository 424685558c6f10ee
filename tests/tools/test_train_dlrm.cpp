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

// Production sizes: three 10M-row tables of width 128 and 60,000-sample batches. A shard's pull of
// ~360k rows (180 MB) and its push go in 4 MiB chunks (issue: it used to fail with an oversized frame).
BOOST_AUTO_TEST_CASE(sixty_thousand_sample_batches_over_three_ten_million_row_tables) {
  ScratchDir dir("dlrm_big");
  const auto r = run_pipewright(
      "train --model dlrm --dataset synthetic-clicks --ps 1 --embedding-rows 10000000,10000000,10000000 "
      "--embedding-dim 128 --batch-size 60000 --steps 3 --synthetic-size 180000 --eval-batches 1 --summary " +
      dir.file("big.json"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  const auto s = nlohmann::json::parse(std::ifstream(dir.file("big.json")));
  BOOST_TEST(s["steps"].get<int>() == 3, s.dump());
  BOOST_TEST(std::isfinite(s["final_loss"].get<double>()));
  BOOST_TEST(s["ps_rows"].get<std::int64_t>() > 100000, s.dump());
}

BOOST_AUTO_TEST_SUITE_END()
