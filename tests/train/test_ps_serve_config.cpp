// A parameter server's JSON config (what `pipewright launch --ps` writes for `ps serve --config`):
// it round-trips, becomes the same shard config `train --ps` builds for its threads, and a bad
// field or file is a one-line InputError naming it.
#include <fstream>

#include <boost/test/unit_test.hpp>

#include "core/error.h"
#include "tests/tools/cli_runner.h"
#include "train/parameter_servers.h"
#include "train/ps_serve_config.h"

using namespace pw;

BOOST_AUTO_TEST_SUITE(ps_serve_config)

BOOST_AUTO_TEST_CASE(the_json_form_round_trips_through_a_file) {
  test::ScratchDir dir("ps_serve_config");
  train::PsServeConfig c;
  c.bind = "127.0.0.1:4321";
  c.shard = 1;
  c.shards = 3;
  c.workers = 2;
  c.snapshot_every = 50;
  c.ps.mode = dp::UpdateMode::Bounded;
  c.ps.admit_after = 2;
  c.ps.max_rows = 100;
  c.ps.dir = "ps-folder";
  train::write_ps_serve_config(c, dir.file("c.json"));
  const train::PsServeConfig back = train::read_ps_serve_config(dir.file("c.json"));
  BOOST_TEST(train::to_json(back) == train::to_json(c));
  BOOST_TEST(train::to_json(c)["ps"]["admit_after"] == 2);
}

BOOST_AUTO_TEST_CASE(it_gives_the_shard_config_train_builds_for_its_threads) {
  train::JobConfig job;
  job.replicas.replicas = 4;
  job.ps.mode = dp::UpdateMode::Async;
  job.ps.row_ttl = 9;
  train::PsServeConfig c;
  c.shard = 2;
  c.shards = 3;
  c.workers = job.replicas.replicas;
  c.ps = job.ps;
  const dp::PsShardConfig from_file = train::shard_config_of(c), from_job = train::ps_shard_config(job, 2, 3);
  BOOST_TEST(from_file.shard == from_job.shard);
  BOOST_TEST(from_file.shards == from_job.shards);
  BOOST_TEST(from_file.workers == 4);
  BOOST_TEST((from_file.mode == from_job.mode));
  BOOST_REQUIRE(from_file.bounds.has_value());
  BOOST_TEST((*from_file.bounds == *from_job.bounds));
  BOOST_TEST(from_file.dir.empty());
  c.ps = train::ParameterServerConfig{};
  c.ps.dir = "servers";
  const dp::PsShardConfig kept = train::shard_config_of(c);
  BOOST_TEST(kept.dir == "servers/shard2");
  BOOST_TEST(!kept.bounds.has_value());   // no bound set: each table brings its own
}

BOOST_AUTO_TEST_CASE(bad_fields_and_files_are_one_line_input_errors) {
  test::ScratchDir dir("ps_serve_config_bad");
  const auto refused = [](const nlohmann::json& j, const std::string& expected) {
    try {
      train::shard_config_of(train::ps_serve_config_from_json(j));
      BOOST_FAIL("no error; expected " << expected);
    } catch (const InputError& e) {
      BOOST_TEST(std::string(e.what()).find(expected) != std::string::npos, e.what());
      BOOST_TEST(std::string(e.what()).find('\n') == std::string::npos, e.what());
    }
  };
  refused({{"shard", 3}, {"shards", 2}}, "/shard: 3, expected 0 to 1");
  refused({{"workers", 0}}, "/workers: 0, expected 1 or more");
  refused({{"shards", "two"}}, "parameter-server config:");
  refused({{"ps", {{"mode", "eventually"}}}}, "eventually");
  refused(nlohmann::json::array(), "is a JSON object");
  BOOST_CHECK_THROW(train::read_ps_serve_config(dir.file("missing.json")), InputError);
  std::ofstream(dir.file("bad.json")) << "{not json";
  try {
    train::read_ps_serve_config(dir.file("bad.json"));
    BOOST_FAIL("no error for a file that is not JSON");
  } catch (const InputError& e) {
    BOOST_TEST(std::string(e.what()).find(dir.file("bad.json")) != std::string::npos, e.what());
  }
}

BOOST_AUTO_TEST_SUITE_END()
