// Straggler detection: the detector on figures made up here (windows, medians, thresholds, cost),
// and a job with one rank slowed on purpose (PW_INJECT_STEP_DELAY) that names it.
#include <algorithm>
#include <fstream>

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "tests/tools/cli_runner.h"
#include "train/straggler_detector.h"

using pw::train::StragglerDetector;

BOOST_AUTO_TEST_SUITE(straggler_detector)

BOOST_AUTO_TEST_CASE(a_rank_slower_than_its_stages_other_replicas_is_named_at_the_windows_end) {
  // 2 stages x 3 replicas; rank 4 = replica 2 of stage 0.
  StragglerDetector d(2, 3, 0.2, 4);
  for (std::int64_t step = 1; step <= 3; ++step)
    BOOST_TEST(d.add(step, {1.0, 2.0, 1.0, 2.0, 1.5, 2.0}, 2.5).empty());   // mid-window: nothing yet
  const auto found = d.add(4, {1.0, 2.0, 1.1, 2.0, 1.5, 2.0}, 2.5);
  BOOST_REQUIRE_EQUAL(found.size(), 1u);
  BOOST_TEST(found[0].rank == 4);
  BOOST_TEST(found[0].stage == 0);
  BOOST_TEST(found[0].replica == 2);
  BOOST_TEST(found[0].first_step == 1);
  BOOST_TEST(found[0].last_step == 4);
  BOOST_TEST(found[0].own_seconds == 1.5);
  BOOST_TEST(found[0].peer_seconds == 1.0);   // medians 1.0 and 1.0 (rank 2's one 1.1 is not its median)
  BOOST_TEST(found[0].slower_by == 0.5, boost::test_tools::tolerance(1e-12));
  BOOST_TEST(found[0].cost_seconds == 2.0, boost::test_tools::tolerance(1e-12));   // 0.5 s x 4 steps
  BOOST_TEST(d.cost_seconds() == 2.0, boost::test_tools::tolerance(1e-12));

  // Next window: under the threshold (1.15 < 1.2), and one outlier step does not move a median.
  for (std::int64_t step = 5; step <= 7; ++step)
    BOOST_TEST(d.add(step, {1.0, 2.0, 1.0, 2.0, 1.15, 2.0}, 2.5).empty());
  BOOST_TEST(d.add(8, {1.0, 2.0, 1.0, 2.0, 9.0, 2.0}, 9.5).empty());
  // Slower by more than the threshold but by less than 5% of the step: noise, not a straggler.
  StragglerDetector fine(1, 2, 0.2, 1);
  BOOST_TEST(fine.add(1, {0.010, 0.013}, 0.100).empty());
  BOOST_TEST(fine.add(2, {0.010, 0.016}, 0.100).size() == 1u);
  const auto summary = d.summary();
  BOOST_REQUIRE_EQUAL(summary.size(), 1u);
  BOOST_TEST(summary[0]["rank"] == 4);
  BOOST_TEST(summary[0]["windows"] == 1);
  BOOST_TEST(summary[0]["steps"][0][0] == 1);
  BOOST_TEST(summary[0]["steps"][0][1] == 4);
}

BOOST_AUTO_TEST_CASE(one_replica_has_no_peers_and_equal_ranks_are_not_stragglers) {
  StragglerDetector alone(4, 1, 0.2, 1);
  BOOST_TEST(alone.add(1, {1.0, 5.0, 1.0, 1.0}, 5.0).empty());
  StragglerDetector even(1, 2, 0.2, 1);
  BOOST_TEST(even.add(1, {1.0, 1.0}, 1.0).empty());
  BOOST_TEST(even.add(2, {0.0, 0.0}, 0.0).empty());   // nothing measured: nobody is slower
  BOOST_TEST(even.summary().empty());
}

BOOST_AUTO_TEST_CASE(a_job_with_one_slowed_rank_reports_it_and_what_it_cost) {
  pw::test::ScratchDir dir("stragglers");
  const auto summary_path = dir.file("s.json");
  // 2 stages x 2 replicas; rank 3 (stage 1, replica 1) sleeps 60 ms before each step. Its own time
  // is then at least 60 ms a step whatever the machine's load; its peer's is the compute of a tiny
  // model, far below.
  const auto r = pw::test::run_command(
      "env PW_INJECT_STEP_DELAY=3:60 " + pw::test::pipewright_binary() +
      " train --model seed-cnn --dataset synthetic --synthetic-size 512 --threads 1 --batch-size 16 --stages 2 "
      "--replicas 2 --steps 12 --eval-batches 1 --straggler-window 6 --straggler-threshold 0.5 --summary " +
      summary_path);
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  BOOST_TEST(r.output.find("straggler: rank 3 (stage 1, replica 1)") != std::string::npos, r.output);
  const auto j = nlohmann::json::parse(std::ifstream(summary_path));
  // Rank 3 is named, and costs more than anything else named: on a loaded machine another rank's
  // compute may straggle for a window too, which is then reported, and right to be.
  const nlohmann::json* slowed = nullptr;
  double others_cost = 0.0;
  for (const auto& s : j["stragglers"]) {
    if (s["rank"] == 3) slowed = &s;
    else others_cost = std::max(others_cost, s["cost_seconds"].get<double>());
  }
  BOOST_REQUIRE_MESSAGE(slowed != nullptr, j["stragglers"].dump());
  const auto& s = *slowed;
  BOOST_TEST(s["stage"] == 1);
  BOOST_TEST(s["replica"] == 1);
  BOOST_TEST(s["windows"].get<int>() >= 1);
  BOOST_TEST(s["max_slower_by"].get<double>() > 0.5);
  BOOST_TEST(s["cost_seconds"].get<double>() > others_cost);
}

BOOST_AUTO_TEST_SUITE_END()
