// bench/chaos.sh, short: a soak of about a minute with a random rank or parameter server killed
// every 20 s (2 stages x 2 replicas, 2 servers, launch --max-restarts) ends bitwise equal to the
// undisturbed run (weights, losses, the last checkpoint's files) with no process of the job left.
// The script checks all of that itself and exits 1 otherwise; here its status and summary lines.
#include <cstdlib>
#include <regex>
#include <string>

#include <boost/test/unit_test.hpp>

#include "tests/tools/cli_runner.h"

BOOST_AUTO_TEST_SUITE(chaos_soak)

BOOST_AUTO_TEST_CASE(a_short_soak_ends_bitwise_equal_with_no_process_left) {
  const char* source = std::getenv("PW_SOURCE_DIR");
  const std::string script = std::string(source != nullptr ? source : ".") + "/bench/chaos.sh";
  const auto r = pw::test::run_command("PW_BIN=" + pw::test::pipewright_binary() + " " + script +
                                       " --minutes 1 --fault-every 20 --seed 3 --require-faults 1");
  BOOST_TEST_MESSAGE(r.output);
  BOOST_TEST(r.status == 0, r.output);
  BOOST_TEST(r.output.find(R"("bitwise_equal": "yes", "leftover_processes": 0, "disturbed_status": 0)") !=
                 std::string::npos,
             r.output);
  std::smatch faults;
  BOOST_REQUIRE_MESSAGE(std::regex_search(r.output, faults, std::regex(R"("faults_injected": (\d+))")), r.output);
  BOOST_TEST(std::stoi(faults[1].str()) >= 1, r.output);
}

BOOST_AUTO_TEST_SUITE_END()
