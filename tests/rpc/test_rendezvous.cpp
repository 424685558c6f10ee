// The rendezvous service: layout, store, barriers, token checks, and how a lost or silent rank
// fails the job for everyone; and the launcher environments a rank reads.
#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <thread>

#include <boost/test/unit_test.hpp>

#include "pipewright/log.h"

#include "rpc/launch_env.h"
#include "rpc/rendezvous_client.h"
#include "rpc/rendezvous_server.h"

using namespace pw;
using namespace std::chrono_literals;

namespace {

const std::string kToken = "test-token-0123456";

rpc::Deadline in(std::chrono::milliseconds ms) { return std::chrono::steady_clock::now() + ms; }

struct Job {
  explicit Job(int world, int stages = 0, std::chrono::milliseconds heartbeat_timeout = 2000ms)
      : server(rpc::HostPort{"127.0.0.1", 0},
               rpc::RendezvousConfig{world, stages > 0 ? stages : world, kToken, heartbeat_timeout}) {}
  rpc::RendezvousClient client(int rank) { return rpc::RendezvousClient(server.address(), kToken, rank); }
  rpc::RendezvousServer server;
};

// Registers ranks 0..n-1 concurrently and returns their layouts.
std::vector<pw::rpc::wire::JobLayout> register_all(Job& job, int n) {
  std::vector<rpc::wire::JobLayout> layouts(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      auto c = job.client(r);
      layouts[static_cast<std::size_t>(r)] = c.register_rank("127.0.0.1:" + std::to_string(4000 + r), in(10000ms));
    });
  for (auto& t : threads) t.join();
  return layouts;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(rendezvous)

BOOST_AUTO_TEST_CASE(every_rank_gets_the_same_layout) {
  Job job(4, 2);
  const auto layouts = register_all(job, 4);
  for (const auto& l : layouts) {
    BOOST_TEST(l.world_size == 4);
    BOOST_TEST(l.pipeline_stages == 2);
    BOOST_TEST(l.replicas == 2);
    BOOST_REQUIRE(l.ranks.size() == 4u);
    for (int r = 0; r < 4; ++r) {
      BOOST_TEST(l.ranks[r].stage == r % 2);
      BOOST_TEST(l.ranks[r].replica == r / 2);
      BOOST_TEST(l.ranks[r].address == "127.0.0.1:" + std::to_string(4000 + r));
    }
  }
}

BOOST_AUTO_TEST_CASE(registration_times_out_naming_the_missing_ranks) {
  Job job(3);
  auto c = job.client(1);
  try {
    c.register_rank("127.0.0.1:4001", in(300ms));
    BOOST_FAIL("expected a timeout");
  } catch (const rpc::TimeoutError& e) {
    BOOST_TEST(std::string(e.what()).find("ranks 0, 2 not registered") != std::string::npos, e.what());
  }
}

BOOST_AUTO_TEST_CASE(store_and_barrier) {
  Job job(2);
  std::thread other([&] {
    auto c = job.client(1);
    BOOST_TEST(c.get("nccl/0-1", in(5000ms)) == std::string("\0id\xff", 4));
    c.barrier("b", in(5000ms));
  });
  auto c = job.client(0);
  c.set("nccl/0-1", std::string("\0id\xff", 4));
  c.barrier("b", in(5000ms));
  other.join();
  BOOST_CHECK_THROW(c.get("never-set", in(200ms)), rpc::TimeoutError);
}

BOOST_AUTO_TEST_CASE(a_wrong_token_or_rank_is_refused) {
  Job job(2);
  rpc::RendezvousClient intruder(job.server.address(), "not-the-token", 0);
  try {
    intruder.set("k", "v");
    BOOST_FAIL("expected a refusal");
  } catch (const InputError& e) {
    BOOST_TEST(std::string(e.what()).find("refused this rank's job token") != std::string::npos, e.what());
  }
  auto outsider = job.client(7);
  BOOST_CHECK_THROW(outsider.register_rank("127.0.0.1:1", in(1000ms)), Error);
  auto bad_address = job.client(0);
  BOOST_CHECK_THROW(bad_address.register_rank("no-port-here", in(1000ms)), Error);
}

BOOST_AUTO_TEST_CASE(a_rank_with_a_wrong_token_is_named_by_itself_and_by_rank_0_at_once) {
  std::mutex mutex;
  std::vector<std::string> warnings;
  pw::set_log_sink([&](pw::LogLevel level, std::string_view message) {
    if (level != pw::LogLevel::Warn) return;
    std::lock_guard lock(mutex);
    warnings.emplace_back(message);
  });
  struct RestoreSink {
    ~RestoreSink() { pw::set_log_sink({}); }
  } restore;
  Job job(2);
  // Rank 1 comes first with another job's token: refused at once, in one line of its own.
  rpc::RendezvousClient rank1(job.server.address(), "another-jobs-token", 1);
  try {
    rank1.register_rank("127.0.0.1:4001", in(10000ms));
    BOOST_FAIL("expected a refusal");
  } catch (const InputError& e) {
    BOOST_TEST(std::string(e.what()).find("rank 1: rendezvous at") != std::string::npos, e.what());
    BOOST_TEST(std::string(e.what()).find("give every rank of the job the same PW_JOB_TOKEN") != std::string::npos,
               e.what());
  }
  {
    // Rank 0's log has named the intruder already: the note is written before the refusal is sent.
    std::lock_guard lock(mutex);
    const auto named = std::find_if(warnings.begin(), warnings.end(), [](const std::string& w) {
      return w.find("a connection from 127.0.0.1 claiming rank 1 presented a wrong job token") != std::string::npos;
    });
    BOOST_TEST((named != warnings.end()));
  }
  // And rank 0's registration, when it times out, names it again.
  auto rank0 = job.client(0);
  try {
    rank0.register_rank("127.0.0.1:4000", in(300ms));
    BOOST_FAIL("expected a timeout");
  } catch (const rpc::TimeoutError& e) {
    const std::string message = e.what();
    BOOST_TEST(message.find("rank 1 not registered; rank 1 tried from 127.0.0.1 with a wrong job token") !=
                   std::string::npos,
               message);
  }
}

BOOST_AUTO_TEST_CASE(a_rank_whose_heartbeat_connection_closes_fails_the_job) {
  Job job(3);
  register_all(job, 3);
  std::string heard;
  std::mutex m;
  rpc::Heartbeat survivor(job.server.address(), kToken, 0, 50ms, 2000ms, [&](const std::string& reason) {
    std::lock_guard lock(m);
    heard = reason;
  });
  {
    rpc::Heartbeat doomed(job.server.address(), kToken, 2, 50ms, 2000ms, [](const std::string&) {});
    std::this_thread::sleep_for(200ms);
  }   // closes without leaving: as if killed
  const auto until = std::chrono::steady_clock::now() + 3s;
  while (std::chrono::steady_clock::now() < until && survivor.failure().empty()) std::this_thread::sleep_for(20ms);
  BOOST_TEST(survivor.failure().find("rank 2 (stage 2) was lost") != std::string::npos, survivor.failure());
  std::lock_guard lock(m);
  BOOST_TEST(heard == survivor.failure());
  // Blocking calls of the failed job throw AbortedError with the reason.
  auto c = job.client(1);
  BOOST_CHECK_THROW(c.barrier("never", in(5000ms)), rpc::AbortedError);
}

BOOST_AUTO_TEST_CASE(a_rank_that_left_is_not_lost_and_a_silent_one_is) {
  Job job(2, 0, 500ms);
  register_all(job, 2);
  rpc::Heartbeat zero(job.server.address(), kToken, 0, 50ms, 2000ms, [](const std::string&) {});
  {
    rpc::Heartbeat one(job.server.address(), kToken, 1, 50ms, 2000ms, [](const std::string&) {});
    std::this_thread::sleep_for(150ms);
    one.stop();
    job.client(1).leave();
  }
  std::this_thread::sleep_for(800ms);   // past the 500 ms heartbeat timeout
  BOOST_TEST(job.server.failure().empty(), job.server.failure());
  zero.stop();   // rank 0 goes silent without leaving
  std::this_thread::sleep_for(1000ms);
  BOOST_TEST(job.server.failure().find("rank 0 (stage 0) stopped answering: no heartbeat for") != std::string::npos,
             job.server.failure());
}

BOOST_AUTO_TEST_CASE(a_failure_report_names_the_rank_and_reason) {
  Job job(2);
  register_all(job, 2);
  job.client(1).report_failure("out of memory on cpu:0");
  BOOST_TEST(job.server.failure() == "rank 1 (stage 1) failed: out of memory on cpu:0");
}

BOOST_AUTO_TEST_SUITE_END()

BOOST_AUTO_TEST_SUITE(launch_environment)

namespace {
std::optional<rpc::LaunchEnv> env_of(const std::map<std::string, std::string>& vars) {
  return rpc::launch_env_from([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}
const std::map<std::string, std::string> kCommon = {{"MASTER_ADDR", "10.0.0.1"}, {"PW_JOB_TOKEN", "abc123-0123456789"}};
std::map<std::string, std::string> with(std::map<std::string, std::string> vars) {
  vars.insert(kCommon.begin(), kCommon.end());
  return vars;
}
}  // namespace

BOOST_AUTO_TEST_CASE(torchrun_slurm_and_open_mpi_variables) {
  BOOST_TEST(!env_of({}).has_value());
  BOOST_TEST(!env_of(with({{"WORLD_SIZE", "1"}, {"RANK", "0"}})).has_value());
  auto t = env_of(with({{"WORLD_SIZE", "8"}, {"RANK", "5"}, {"LOCAL_RANK", "1"}, {"MASTER_PORT", "1234"}}));
  BOOST_REQUIRE(t.has_value());
  BOOST_TEST(t->rank == 5);
  BOOST_TEST(t->world_size == 8);
  BOOST_TEST(t->local_rank == 1);
  BOOST_TEST(t->master.str() == "10.0.0.1:1234");
  BOOST_TEST(t->launcher == "torchrun-style");
  // Not inside an srun step: an salloc shell or a batch script.
  BOOST_TEST(!env_of(with({{"SLURM_NTASKS", "4"}, {"SLURM_PROCID", "0"}})).has_value());
  auto s = env_of(with({{"SLURM_NTASKS", "4"}, {"SLURM_PROCID", "3"}, {"SLURM_LOCALID", "1"},
                        {"SLURM_NTASKS_PER_NODE", "2(x2)"}, {"SLURM_STEP_ID", "0"}}));
  BOOST_REQUIRE(s.has_value());
  BOOST_TEST(s->rank == 3);
  BOOST_TEST(s->local_rank == 1);
  BOOST_TEST(s->master.port == rpc::kDefaultMasterPort);
  BOOST_TEST(s->launcher == "Slurm");
  auto m = env_of(with({{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "1"},
                        {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "1"}}));
  BOOST_REQUIRE(m.has_value());
  BOOST_TEST(m->rank == 1);
  BOOST_TEST(m->launcher == "Open MPI");
  auto tr = env_of(with({{"WORLD_SIZE", "2"}, {"RANK", "0"}, {"MASTER_PORT", "29500"}, {"TORCHELASTIC_RUN_ID", "x"}}));
  BOOST_TEST(tr->launcher == "torchrun");
  BOOST_TEST(tr->master.port == 29501);
  // torchrun-style variables win over Slurm's (torchrun inside an allocation).
  auto both = env_of(with({{"WORLD_SIZE", "2"}, {"RANK", "1"}, {"SLURM_NTASKS", "1"}, {"SLURM_PROCID", "0"}}));
  BOOST_TEST(both->launcher == "torchrun-style");
}

BOOST_AUTO_TEST_CASE(the_launchers_restarts_come_with_the_rank_environment) {
  const auto first = env_of(with({{"WORLD_SIZE", "2"}, {"RANK", "1"}}));
  BOOST_REQUIRE(first.has_value());
  BOOST_TEST(first->restarts.count == 0);
  BOOST_TEST(first->restarts.causes.empty());
  const auto again = env_of(with({{"WORLD_SIZE", "2"}, {"RANK", "1"}, {"PW_RESTART_COUNT", "2"},
                                  {"PW_RESTART_CAUSES", R"(["attempt 0: rank 1 failed", "attempt 1: rank 0 failed"])"}}));
  BOOST_REQUIRE(again.has_value());
  BOOST_TEST(again->restarts.count == 2);
  BOOST_TEST(again->restarts.causes.size() == 2u);
  BOOST_TEST(again->restarts.causes.back() == "attempt 1: rank 0 failed");
}

BOOST_AUTO_TEST_CASE(malformed_environments_are_named) {
  const auto message = [](const std::map<std::string, std::string>& vars) {
    try {
      env_of(vars);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  BOOST_TEST(message(with({{"WORLD_SIZE", "4"}, {"RANK", "4"}})).find("RANK=4 is outside WORLD_SIZE=4") !=
             std::string::npos);
  BOOST_TEST(message(with({{"WORLD_SIZE", "four"}, {"RANK", "0"}})).find("WORLD_SIZE='four' is not an integer") !=
             std::string::npos);
  BOOST_TEST(message(with({{"WORLD_SIZE", "2"}})).find("RANK is missing") != std::string::npos);
  BOOST_TEST(message({{"WORLD_SIZE", "2"}, {"RANK", "0"}, {"PW_JOB_TOKEN", "x"}}).find("no MASTER_ADDR") !=
             std::string::npos);
  BOOST_TEST(message({{"WORLD_SIZE", "2"}, {"RANK", "0"}, {"MASTER_ADDR", "h"}}).find("needs the job token in PW_JOB_TOKEN") !=
             std::string::npos);
  BOOST_TEST(message(with({{"WORLD_SIZE", "2"}, {"RANK", "0"}, {"MASTER_PORT", "70000"}})).find("not a port") !=
             std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
