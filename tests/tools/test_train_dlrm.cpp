// `pipewright train --model dlrm --dataset synthetic-clicks`: binary cross-entropy end to end,
// test AUC in the summary, and the same run as a two-stage pipeline.
#include <cmath>
#include <cstdio>
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
  BOOST_TEST(r.output.find("--dataset: fashion-mnist: --model dlrm reads click data; use synthetic-clicks") !=
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

// Issue 16.3: tables capped on the servers. Zipf ids over three 10M-row tables; a cap of 500
// rows per table and shard, rows on an id's second sighting, rows idle for 100 steps dropped:
// the cap holds on every shard and the test AUC stays within 0.02 of the uncapped run's.
BOOST_AUTO_TEST_CASE(capped_server_tables_keep_the_cap_and_the_auc_of_uncapped_ones) {
  ScratchDir dir("dlrm_capped");
  const std::string args = "train --model dlrm --dataset synthetic-clicks --synthetic-size 40000 --embedding-rows "
                           "10000000,10000000,10000000 --ps 2 --steps 600 --batch-size 64 --threads 1 --summary ";
  auto r = run_pipewright(args + dir.file("free.json"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  r = run_pipewright(args + dir.file("capped.json") + " --ps-max-rows 500 --ps-admit-after 2 --ps-row-ttl 100");
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  const auto free = nlohmann::json::parse(std::ifstream(dir.file("free.json")));
  const auto capped = nlohmann::json::parse(std::ifstream(dir.file("capped.json")));
  BOOST_TEST(free["ps_peak_table_rows"].get<std::int64_t>() > 500, free.dump());   // the cap binds
  BOOST_TEST(capped["ps_peak_table_rows"].get<std::int64_t>() <= 500, capped.dump());
  for (const auto& rows : capped["ps_rows_per_shard"]) BOOST_TEST(rows.get<std::int64_t>() <= 3 * 500);
  BOOST_TEST(capped["ps_evictions"].get<std::int64_t>() > 0);
  BOOST_TEST(capped["ps_dropped_rows"].get<std::int64_t>() > 0);
  BOOST_TEST(capped["ps_max_rows"].get<std::int64_t>() == 500);
  const double a = free["test_auc"].get<double>(), b = capped["test_auc"].get<double>();
  std::printf("test AUC uncapped %.4f, capped %.4f\n", a, b);
  BOOST_TEST(a > 0.68);
  BOOST_TEST(std::abs(a - b) <= 0.02);
}

BOOST_AUTO_TEST_CASE(bad_table_bounds_are_refused_with_one_line) {
  ScratchDir dir("dlrm_bounds");
  const std::string base = "train --model dlrm --dataset synthetic-clicks --steps 2 --ps 1 ";
  const std::pair<std::string, std::string> cases[] = {
      {"--ps-max-rows 0", "--ps-max-rows: got 0; expected a positive row count (leave the flag out for no cap)"},
      {"--ps-max-rows -4", "--ps-max-rows: got -4; expected a positive row count"},
      {"--ps-admit-after 0", "--ps-admit-after: got 0; expected 1 to 255 sightings"},
      {"--ps-admit-after 256", "--ps-admit-after: got 256; expected 1 to 255 sightings"},
      {"--ps-row-ttl 0", "--ps-row-ttl: got 0; expected a positive number of steps"},
      {"--ps-row-ttl x", "--ps-row-ttl: got x; expected a positive number of steps"},
  };
  for (const auto& [flags, message] : cases) {
    const auto r = run_pipewright(base + flags);
    BOOST_TEST(r.status != 0, flags);
    BOOST_TEST(r.output.find(message) != std::string::npos, flags << ": " << r.output);
  }
  const auto r = run_pipewright("train --model dlrm --dataset synthetic-clicks --steps 2 --ps-max-rows 10");
  BOOST_TEST(r.status != 0);
  BOOST_TEST(r.output.find("--ps-max-rows: bounds the tables on parameter servers; give --ps or --ps-servers too") !=
                 std::string::npos,
             r.output);
}

BOOST_AUTO_TEST_SUITE_END()
