// Jobs that could never fit (issue 49): `train --model dlrm` with 16,000 tables and `plan --model
// resnet18 --width 4096` used to build every layer before any size check and grow to 24 GiB until
// the kernel killed them. Now they are one line with status 2 naming the flag, what the job needs
// and what the host has, before anything is allocated. Each runs under a 4 GiB address-space limit
// (ulimit -v), so a regression fails here (out of memory) instead of swapping the machine; the
// limit is then what "the host has".
#include <algorithm>
#include <string>

#include <boost/test/unit_test.hpp>

#include "tests/tools/cli_runner.h"

using namespace pw::test;

namespace {

// `pipewright ARGS` with at most 4 GiB of address space.
CommandResult run_limited(const std::string& args) {
  return run_command("ulimit -v 4194304 && exec " + pipewright_binary() + " " + args);
}

std::string tables(int count, int rows) {
  std::string list;
  for (int i = 0; i < count; ++i) list += (i > 0 ? "," : "") + std::to_string(rows);
  return list;
}

void expect_one_line_refusal(const CommandResult& r, const std::string& flag) {
  BOOST_TEST(r.status == 2, r.output);
  BOOST_TEST(r.output.rfind("pipewright: error: " + flag + ": ", 0) == 0u, r.output);
  BOOST_TEST(std::count(r.output.begin(), r.output.end(), '\n') == 1, r.output);
  BOOST_TEST(r.output.find("needs at least") != std::string::npos, r.output);
  BOOST_TEST(r.output.find("more than the ") != std::string::npos, r.output);   // the 4 GiB limit
}

}  // namespace

BOOST_AUTO_TEST_SUITE(impossible_jobs)

BOOST_AUTO_TEST_CASE(dlrm_with_16000_tables_is_one_line_naming_embedding_rows) {
  const auto r = run_limited("train --model dlrm --dataset synthetic-clicks --synthetic-size 64 --batch-size 8 "
                             "--steps 1 --embedding-rows " + tables(16000, 1000));
  expect_one_line_refusal(r, "--embedding-rows");
  BOOST_TEST(r.output.find("16000 tables") != std::string::npos, r.output);
  BOOST_TEST(r.output.find("128008008 values wide") != std::string::npos, r.output);
  BOOST_TEST(r.output.find("--embedding-dim 8") != std::string::npos, r.output);   // the field, as its flag
}

BOOST_AUTO_TEST_CASE(more_tables_than_the_interaction_can_count_are_refused_by_number) {
  const auto r = run_limited("plan --model dlrm --dataset synthetic-clicks --batch-size 8 --embedding-rows " +
                             tables(46341, 1));
  BOOST_TEST(r.status == 2, r.output);
  BOOST_TEST(r.output.rfind("pipewright: error: --embedding-rows: 46341 tables; at most 46340", 0) == 0u, r.output);
  BOOST_TEST(std::count(r.output.begin(), r.output.end(), '\n') == 1, r.output);
}

BOOST_AUTO_TEST_CASE(resnet18_at_width_4096_is_one_line_naming_width) {
  const auto plan = run_limited("plan --model resnet18 --width 4096 --dataset synthetic --synthetic-shape 3x32x32 "
                                "--batch-size 8");
  expect_one_line_refusal(plan, "--width");
  BOOST_TEST(plan.output.find("4096: resnet18 has 45.") != std::string::npos, plan.output);
  const auto train = run_limited("train --model resnet18 --width 4096 --dataset synthetic --synthetic-shape 3x32x32 "
                                 "--synthetic-size 64 --batch-size 8 --steps 1");
  expect_one_line_refusal(train, "--width");
}

BOOST_AUTO_TEST_CASE(what_fits_still_plans_under_the_same_limit) {
  const auto r = run_limited("plan --model resnet18 --width 8 --dataset synthetic --synthetic-shape 3x32x32 "
                             "--batch-size 8");
  BOOST_TEST(r.status == 0, r.output);
}

BOOST_AUTO_TEST_SUITE_END()
