// pipewright prof --hang: flight records of a stuck job name where it was stuck. A rank made to
// stall (PW_INJECT_FAULT=stall) is named as computing, with the rank that waited for it; programs
// whose sends and receives come in mismatched orders are named as a deadlock between the two.
#include <signal.h>

#include <chrono>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <optional>
#include <random>
#include <thread>

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "models/data/dataset.h"
#include "partition/partitioners.h"
#include "pipeline/micro_batch.h"
#include "pipeline/stage_executor.h"
#include "rpc/in_process_transport.h"
#include "tests/tools/background_command.h"
#include "tests/tools/cli_runner.h"
#include "tools/prof/hang_analysis.h"
#include "train/flight_dump.h"

using namespace pw;
using namespace pw::pipeline;

BOOST_AUTO_TEST_SUITE(hang_analysis)

BOOST_AUTO_TEST_CASE(a_stalled_rank_is_named_computing_and_its_neighbour_waiting_for_it) {
  pw::test::ScratchDir dir("hang-stall");
  const auto debug = dir.path / "debug";
  const auto r = pw::test::run_command(
      "env PW_INJECT_FAULT=stall@3:1 " + pw::test::pipewright_binary() +
      " train --model seed-cnn --dataset synthetic --synthetic-size 512 --threads 1 --batch-size 16 --stages 2 "
      "--steps 6 --stage-timeout 3 --debug-dir " + debug.string());
  BOOST_TEST(r.status == 4, r.output);   // a timeout
  BOOST_TEST(std::filesystem::exists(debug / "flight-rank0.json"));
  BOOST_TEST(std::filesystem::exists(debug / "flight-rank1.json"));
  // The ranks kept live records while they ran, and removed them as they ended.
  BOOST_TEST(!std::filesystem::exists(debug / "flight-rank0.live"));
  BOOST_TEST(!std::filesystem::exists(debug / "flight-rank1.live"));
  const auto prof = pw::test::run_pipewright("prof --hang " + debug.string());
  BOOST_TEST_INFO(prof.output);
  BOOST_TEST(prof.status == 0);
  // Step 3 of the job is the executor's step 2; rank 1 stalls in its first forward.
  BOOST_TEST(prof.output.find("stuck: rank 0 (stage 0, replica 0) waited in 'rG0' (instruction 4 of step 2, "
                              "micro-batch 0) for the gradient of micro-batch 0 (step 2) from rank 1") == 0u);
  BOOST_TEST(prof.output.find("rank 1 (stage 1, replica 0) sends it only at instruction 3 'sG0' of its program, and "
                              "was still computing 'F0' (instruction 1 of step 2, micro-batch 0)") != std::string::npos);
  BOOST_TEST(prof.output.find("  rank 1 (stage 1, replica 0): computing 'F0'") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(programs_with_mismatched_send_and_receive_orders_are_named_a_deadlock) {
  // Stage 0 waits for micro-batch 0's gradient before it sends micro-batch 1's activation; stage 1
  // waits for micro-batch 1's activation before it sends micro-batch 0's gradient. Each program is
  // whole on its own; together they deadlock (a schedule file's simulation would refuse them, so
  // they are given to the executors directly).
  const ScheduleSpec spec{ScheduleKind::GPipe, 2, 2, 1};
  const std::vector<std::string> programs = {"F0 sA0 rG0 B0 F1 sA1 rG1 B1 RG S", "rA1 F1 B1 sG1 rA0 F0 B0 sG0 RG S"};
  models::ModelOptions o;
  o.sample_shape = {1, 12, 12};
  const auto model = partition::describe(models::make_model_spec("seed-cnn", o));
  const auto split = partition::split_at(model.layer_count(), {3});
  rpc::InProcessHub hub(2);
  std::vector<std::unique_ptr<rpc::Transport>> transports;
  std::vector<std::unique_ptr<StageExecutor>> executors;
  std::vector<train::FlightRegistration> registered;
  models::OptimizerConfig optimizer;
  optimizer.kind = models::OptimizerKind::Sgd;
  for (int s = 0; s < 2; ++s) {
    const auto su = static_cast<std::size_t>(s);
    StageConfig config;
    config.spec = spec;
    config.stage = s;
    config.device = kernels::Device::cpu(s);
    config.program = from_text(programs[su]);
    config.timeout = std::chrono::seconds(2);
    std::vector<std::unique_ptr<models::Sequential>> chunks;
    {
      models::LayerDeviceScope on_device(config.device);
      chunks.push_back(partition::build_stage(model, split[su], 11));
    }
    transports.push_back(hub.endpoint(s));
    executors.push_back(std::make_unique<StageExecutor>(config, std::move(chunks), optimizer, *transports[su]));
    registered.emplace_back(train::FlightSource{s, s, 0, 2, 1, 1, &executors.back()->flight_recorder(), programs[su]});
  }
  auto data = models::data::make_synthetic_images(16, {1, 12, 12}, 10, 5);
  std::vector<std::int64_t> labels;
  kernels::Tensor images = kernels::Tensor::empty({4, 1, 12, 12}, kernels::DType::F32);
  for (int i = 0; i < 4; ++i) {
    std::int64_t label = 0;
    data->fill(i, images.data<float>() + i * 144, label);
    labels.push_back(label);
  }
  const MicroBatchInputs inputs{split_batch(images, 2),
                                split_batch(kernels::Tensor::from_vector(labels, {4}), 2)};
  std::vector<std::future<void>> done;
  for (auto& e : executors) done.push_back(std::async(std::launch::async, [&e, &inputs] { e->run_step(0, inputs); }));
  for (auto& f : done) BOOST_CHECK_THROW(f.get(), pw::TimeoutError);

  pw::test::ScratchDir dir("hang-mismatch");
  BOOST_REQUIRE(train::dump_flight_records(dir.path.string(), "test") == 2);
  const auto d = tools::diagnose_hang(tools::read_flight_records(dir.path.string()));
  BOOST_TEST_MESSAGE(tools::format_hang(d));
  BOOST_TEST(d.stuck.find("deadlock: ranks 0 -> 1 -> 0 wait for each other (their programs send and receive in orders that "
                         "do not match).") == 0u);
  BOOST_TEST(d.stuck.find("rank 0 (stage 0, replica 0) waits in 'rG0' (instruction 2 of step 0, micro-batch 0)") !=
             std::string::npos);
  BOOST_TEST(d.stuck.find("rank 1 (stage 1, replica 0) sends it only at instruction 7 'sG0' of its program") !=
             std::string::npos);
  BOOST_REQUIRE(d.ranks.size() == 2u);
  BOOST_TEST(d.ranks[1].find("rank 1 (stage 1, replica 0): waited") == 0u);
  BOOST_TEST(d.ranks[1].find("in 'rA1' (instruction 0 of step 0, micro-batch 1)") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(a_rank_stopped_with_sigterm_writes_its_record_first) {
  pw::test::ScratchDir dir("hang-sigterm");
  const auto debug = dir.path / "debug";
  pw::test::BackgroundCommand job(pw::test::pipewright_binary() +
                                      " train --model seed-cnn --dataset synthetic --synthetic-size 512 --threads 1 "
                                      "--batch-size 16 --stages 2 --steps 1000000 --log-every 1 --debug-dir " +
                                      debug.string(),
                                  dir.file("job.log"));
  BOOST_REQUIRE_MESSAGE(job.wait_for_output("/1000000", std::chrono::seconds(120), 2), job.output());
  // SIGUSR1 asks for the records and the job goes on.
  kill(job.pid(), SIGUSR1);
  BOOST_REQUIRE_MESSAGE(job.wait_for_output("(SIGUSR1)", std::chrono::seconds(60)), job.output());
  BOOST_TEST(!job.wait(std::chrono::milliseconds(0)).has_value());   // still running
  // (prof --hang would read the live records here: the process runs on and has recorded more.)
  for (const auto* name : {"flight-rank0.json", "flight-rank1.json"}) {
    std::ifstream in(debug / name);
    BOOST_TEST(nlohmann::json::parse(in).at("reason").get<std::string>() == "SIGUSR1");
  }
  kill(job.pid(), SIGTERM);
  const auto status = job.wait(std::chrono::seconds(60));
  BOOST_REQUIRE(status.has_value());
  BOOST_TEST(*status == 128 + SIGTERM, job.output());   // it still ends as SIGTERM ends it
  const auto records = tools::read_flight_records(debug.string());
  BOOST_REQUIRE(records.size() == 2u);
  for (const auto& r : records) {
    BOOST_TEST(r.reason.find("SIGTERM") == 0u, r.reason);
    BOOST_TEST(!r.entries.empty());
  }
}

BOOST_AUTO_TEST_CASE(a_rank_killed_with_sigkill_is_named_from_its_live_record) {
  // Two processes; rank 1 stalls in a forward. While the live records show rank 0 waiting for it,
  // rank 1 is killed with SIGKILL, which leaves no dump; rank 0 is stopped by the loss and dumps.
  pw::test::ScratchDir dir("hang-sigkill");
  const auto debug = dir.path / "debug";
  const auto binary = pw::test::pipewright_binary();
  pw::test::BackgroundCommand job("env PW_INJECT_FAULT=stall@3:1 " + binary + " launch --nproc-per-node 2 -- " + binary +
                                      " train --model seed-cnn --dataset synthetic --synthetic-size 512 --threads 1 "
                                      "--batch-size 16 --stages 2 --steps 6 --stage-timeout 120 --debug-dir " +
                                      debug.string(),
                                  dir.file("job.log"));
  std::int64_t stalled_pid = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (stalled_pid == 0 && std::chrono::steady_clock::now() < end && !job.wait(std::chrono::milliseconds(0))) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::vector<tools::RankFlightRecord> records;
    try {
      records = tools::read_flight_records(debug.string());
    } catch (const InputError&) {   // not both files yet
      continue;
    }
    if (records.size() == 2 && records[1].source == tools::RecordSource::LiveProcessRunning &&
        tools::diagnose_hang(records).stuck.find("waited in 'rG0' (instruction 4 of step 2") != std::string::npos)
      stalled_pid = records[1].pid;
  }
  BOOST_REQUIRE_MESSAGE(stalled_pid > 0, job.output());
  kill(static_cast<pid_t>(stalled_pid), SIGKILL);
  const auto status = job.wait(std::chrono::seconds(120));
  BOOST_REQUIRE_MESSAGE(status.has_value(), job.output());
  BOOST_TEST(*status != 0, job.output());
  // Rank 0 dumped (as it failed, or on the launcher's SIGTERM if it took longer to stop than the
  // launcher waits; either way the dump is what is read). Rank 1 left only its live file.
  BOOST_TEST(std::filesystem::exists(debug / "flight-rank0.json"));
  BOOST_TEST(!std::filesystem::exists(debug / "flight-rank1.json"));
  BOOST_TEST(std::filesystem::exists(debug / "flight-rank1.live"));
  const auto prof = pw::test::run_pipewright("prof --hang " + debug.string());
  BOOST_TEST_INFO(prof.output);
  BOOST_TEST(prof.status == 0);
  BOOST_TEST(prof.output.find("stuck: rank 0 (stage 0, replica 0) waited in 'rG0' (instruction 4 of step 2, micro-batch 0) "
                              "for the gradient of micro-batch 0 (step 2) from rank 1: rank 1 (stage 1, replica 0): its "
                              "process (pid " + std::to_string(stalled_pid) + ") ended without a dump (killed or crashed); "
                              "its live record ends in 'F0' (instruction 1 of step 2, micro-batch 0), running") == 0u);
}

BOOST_AUTO_TEST_CASE(a_running_ranks_live_record_is_read_where_it_is_newer_than_its_dump) {
  pw::test::ScratchDir dir("hang-live-choice");
  const auto debug = dir.path / "debug";
  const auto program = from_text("F0 sA0 rG0 B0 sG0 RG S");
  FlightRecorder recorder;
  const auto record = [&](int from, int to) {
    for (int i = from; i < to; ++i) {
      const auto& in = program[static_cast<std::size_t>(i) % program.size()];
      recorder.finish(recorder.start(i / 7, in, i % 7, in.op == OpType::Forward ? -1 : 1, 1), FlightState::Done);
    }
  };
  std::optional<train::FlightRegistration> rank0(std::in_place, train::FlightSource{0, 0, 0, 2, 1, 1, &recorder,
                                                                                     to_text(program, true)});
  rank0->keep_live_record_in(debug.string());
  BOOST_REQUIRE(std::filesystem::exists(debug / "flight-rank0.live"));
  record(0, 5);
  // The process's clock in the file moves on while nothing is recorded (a rank stuck in a wait):
  // an eventual value, polled within a deadline.
  const auto alive = tools::read_flight_records(debug.string()).at(0).dumped_ns;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  auto later = alive;
  while (later < alive + 200'000'000 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    later = tools::read_flight_records(debug.string()).at(0).dumped_ns;
  }
  BOOST_TEST(later >= alive + 200'000'000);
  BOOST_REQUIRE(train::dump_flight_records(debug.string(), "SIGUSR1") == 1);
  auto records = tools::read_flight_records(debug.string());
  BOOST_TEST((records.at(0).source == tools::RecordSource::Dump));   // nothing recorded since the dump
  record(5, 9);
  records = tools::read_flight_records(debug.string());
  BOOST_TEST((records.at(0).source == tools::RecordSource::LiveProcessRunning));
  BOOST_TEST(records.at(0).entries.size() == 9u);
  // Gone by unwinding: the live file is removed, and the dump is what is left.
  rank0.reset();
  BOOST_TEST(!std::filesystem::exists(debug / "flight-rank0.live"));
  records = tools::read_flight_records(debug.string());
  BOOST_TEST((records.at(0).source == tools::RecordSource::Dump));
  BOOST_TEST(records.at(0).entries.size() == 5u);
  // A damaged live file beside a dump of its rank is left out; alone, it is one error naming it.
  std::ofstream(debug / "flight-rank0.live") << "pwflight-live-1 cut short";
  BOOST_TEST(tools::read_flight_records(debug.string()).size() == 1u);
  std::filesystem::remove(debug / "flight-rank0.json");
  try {
    tools::read_flight_records(debug.string());
    BOOST_FAIL("a damaged live file alone was read");
  } catch (const InputError& e) {
    BOOST_TEST(std::string(e.what()).find("flight-rank0.live: not a live flight record") != std::string::npos, e.what());
  }
}

BOOST_AUTO_TEST_CASE(a_live_file_with_random_damage_is_read_or_refused_in_one_line) {
  // Hostile input: bytes of a valid live record changed at random. Reading and diagnosing it
  // either works or is one InputError naming the file; nothing crashes or hangs.
  pw::test::ScratchDir dir("hang-live-fuzz");
  const auto debug = dir.path / "debug";
  const auto program = from_text("rA0 F0 sA0 rG0 B0 sG0 RG S");
  FlightRecorder recorder(16);
  {
    train::FlightRegistration rank1(train::FlightSource{1, 1, 0, 2, 1, 1, &recorder, to_text(program, true)});
    rank1.keep_live_record_in(debug.string());
    for (int i = 0; i < 21; ++i) {
      const auto& in = program[static_cast<std::size_t>(i) % program.size()];
      const auto seq = recorder.start(i / 8, in, i % 8, 0, 1);
      if (i < 20) recorder.finish(seq, FlightState::Done, 64);
    }
    std::filesystem::copy_file(debug / "flight-rank1.live", dir.path / "valid.live");
  }
  std::ifstream in(dir.path / "valid.live", std::ios::binary);
  const std::string valid((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  BOOST_REQUIRE(valid.size() > 1000);
  std::mt19937 rng(7);
  int read = 0, refused = 0;
  for (int trial = 0; trial < 600; ++trial) {
    std::string bytes = valid;
    const int changes = 1 + static_cast<int>(rng() % 8);
    for (int c = 0; c < changes; ++c) {
      // Mostly the header and the first entries, where the fields that steer the reader are.
      const std::size_t at = rng() % 4 == 0 ? rng() % bytes.size() : rng() % std::min<std::size_t>(bytes.size(), 512);
      bytes[at] = static_cast<char>(rng() % 3 == 0 ? 0xFF : rng());
    }
    if (trial % 50 == 0) bytes.resize(rng() % bytes.size());
    std::ofstream(debug / "flight-rank1.live", std::ios::binary | std::ios::trunc) << bytes;
    try {
      const auto records = tools::read_flight_records(debug.string());
      const auto text = tools::format_hang(tools::diagnose_hang(records));
      BOOST_TEST(!text.empty());
      ++read;
    } catch (const InputError& e) {
      const std::string what = e.what();
      BOOST_TEST(what.find("flight-rank1.live") != std::string::npos, what);
      BOOST_TEST(what.find('\n') == std::string::npos, what);
      ++refused;
    }
  }
  BOOST_TEST(read > 0);      // damage to entries' fields that nothing checks still reads
  BOOST_TEST(refused > 0);   // damage to the header is named
}

BOOST_AUTO_TEST_CASE(a_folder_without_records_is_one_line) {
  pw::test::ScratchDir dir("hang-empty");
  const auto prof = pw::test::run_pipewright("prof --hang " + dir.path.string());
  BOOST_TEST(prof.status == 2, prof.output);
  BOOST_TEST(prof.output.find("no flight-rank*.json or flight-rank*.live in it") != std::string::npos, prof.output);
  // A damaged record is named, in one line.
  std::ofstream(dir.file("flight-rank0.json")) << "{\"format\": \"pipewright flight record 1\", \"rank\": 0";
  const auto damaged = pw::test::run_pipewright("prof --hang " + dir.path.string());
  BOOST_TEST(damaged.status == 2, damaged.output);
  BOOST_TEST(damaged.output.find("flight-rank0.json: not a flight record") != std::string::npos, damaged.output);
  BOOST_TEST(std::count(damaged.output.begin(), damaged.output.end(), '\n') == 1, damaged.output);
}

BOOST_AUTO_TEST_SUITE_END()
