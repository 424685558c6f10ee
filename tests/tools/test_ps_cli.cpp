// `pipewright ps serve` as a process: serves pulls and pushes, and after kill -9 and a restart on
// the same folder it has every acknowledged push.
#include <filesystem>
#include <regex>

#include <boost/test/unit_test.hpp>

#include "dataparallel/ps_client.h"
#include "tests/tools/background_command.h"
#include "tests/tools/cli_runner.h"

using namespace pw;
using pw::test::BackgroundCommand;
using pw::test::ScratchDir;
using namespace std::chrono_literals;

namespace {
rpc::HostPort address_in(const std::string& log) {
  std::smatch m;
  BOOST_REQUIRE_MESSAGE(std::regex_search(log, m, std::regex("listening on ([0-9.]+:[0-9]+)")), log);
  return rpc::parse_host_port(m[1].str());
}
}  // namespace

BOOST_AUTO_TEST_SUITE(ps_cli)

BOOST_AUTO_TEST_CASE(a_killed_server_restarts_with_every_acknowledged_push) {
  ScratchDir dir("pscli");
  const std::string serve = "env PW_JOB_TOKEN=tok123 " + pw::test::pipewright_binary() + " ps serve --dir " +
                            dir.file("shard") + " --snapshot-every 4 --bind ";
  auto first = std::make_unique<BackgroundCommand>(serve + "127.0.0.1:0", dir.file("first.log"));
  BOOST_REQUIRE_MESSAGE(first->wait_for_output("listening on", 30s), first->output());
  const auto address = address_in(first->output());
  dp::TableConfig t;
  t.name = "emb";
  t.dim = 8;
  t.optimizer = dp::SparseOptimizerKind::Adagrad;
  std::vector<std::int64_t> keys = {2, 3, 5, 7, 11, 13};
  std::vector<float> before;
  {
    dp::PsClient client({address}, "tok123", 0, 5000ms);
    client.create_table(t);
    for (std::int64_t step = 0; step < 10; ++step) {
      std::vector<float> g(keys.size() * 8);
      for (std::size_t i = 0; i < g.size(); ++i) g[i] = 0.1f * static_cast<float>((i + step) % 7) - 0.3f;
      client.push("emb", 8, keys, g, step);
    }
    before = client.pull("emb", 8, keys, 10, -1);
  }
  kill(first->pid(), SIGKILL);
  BOOST_REQUIRE(first->wait(10s).has_value());
  first.reset();
  BackgroundCommand second(serve + address.str(), dir.file("second.log"));
  BOOST_REQUIRE_MESSAGE(second.wait_for_output("listening on", 30s), second.output());
  dp::PsClient client({address}, "tok123", 0, 5000ms);
  BOOST_TEST(client.pull("emb", 8, keys, 10, -1) == before);
  BOOST_CHECK_NO_THROW(client.push("emb", 8, keys, std::vector<float>(keys.size() * 8, 0.0f), 10));
  kill(second.pid(), SIGTERM);
  BOOST_TEST(second.wait(10s).value_or(-1) == 0);
}

BOOST_AUTO_TEST_CASE(bad_serve_flags_get_one_line_errors) {
  auto r = pw::test::run_pipewright("ps serve --mode eventually");
  BOOST_TEST(r.status == 2);
  BOOST_TEST(r.output.find("needs the job's token in PW_JOB_TOKEN") != std::string::npos, r.output);
  const auto bad_shard = std::system(("env PW_JOB_TOKEN=x " + pw::test::pipewright_binary() +
                                   " ps serve --shard 3 --shards 2 > /dev/null 2>&1").c_str());
  BOOST_TEST(WEXITSTATUS(bad_shard) == 2);   // shard 3 outside 2 shards
}

BOOST_AUTO_TEST_SUITE_END()
