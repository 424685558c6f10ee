// --tensorboard: the event file a job writes is read back by an independent reader
// (tests/train/monitor/read_events.py: python3-protobuf with TensorFlow's message definitions, its
// own CRC-32C), and its scalars are the job's own figures.
#include <cmath>
#include <filesystem>
#include <fstream>

#include <vector>

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "tests/tools/cli_runner.h"

using pw::test::run_command;
using pw::test::run_pipewright;
using pw::test::ScratchDir;

namespace {

std::filesystem::path only_event_file(const std::filesystem::path& folder) {
  std::filesystem::path found;
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(folder))
    if (entry.path().filename().string().rfind("events.out.tfevents.", 0) == 0) {
      found = entry.path();
      ++count;
    }
  BOOST_REQUIRE_MESSAGE(count == 1, count << " event files in " << folder);
  return found;
}

pw::test::CommandResult read_events(const std::filesystem::path& file) {
  return run_command("/usr/bin/python3 tests/train/monitor/read_events.py " + file.string());
}

float as_float(double v) { return static_cast<float>(v); }

}  // namespace

BOOST_AUTO_TEST_SUITE(tensorboard_log)

BOOST_AUTO_TEST_CASE(a_jobs_scalars_read_back_with_tensorflows_definitions) {
  ScratchDir dir("tensorboard");
  const auto folder = dir.path / "tb";
  const auto summary_path = dir.file("s.json");
  const int steps = 6;
  const auto r = run_pipewright(
      "train --model seed-cnn --dataset synthetic --synthetic-size 256 --threads 1 --batch-size 16 --stages 2 "
      "--replicas 2 --eval-batches 2 --steps " + std::to_string(steps) + " --summary " + summary_path +
      " --tensorboard " + folder.string());
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  const auto summary = nlohmann::json::parse(std::ifstream(summary_path));

  const auto read = read_events(only_event_file(folder));
  BOOST_REQUIRE_MESSAGE(read.status == 0, read.output);
  const auto events = nlohmann::json::parse(read.output);
  BOOST_TEST(events["file_version"] == "brain.Event:2");
  const auto& list = events["events"];
  BOOST_REQUIRE_EQUAL(list.size(), static_cast<std::size_t>(steps + 1));   // every step, then the evaluation
  std::vector<int> communicated(2, 0);   // per stage: steps that show a communication share
  for (int i = 0; i < steps; ++i) {
    const auto& e = list[static_cast<std::size_t>(i)];
    BOOST_TEST_CONTEXT("step " << i + 1) {
      BOOST_TEST(e["step"] == i + 1);
      const auto& s = e["scalars"];
      // float32 on the wire: the summary's double, rounded.
      BOOST_TEST(s["train/loss"].get<float>() == as_float(summary["loss_history"][static_cast<std::size_t>(i)].get<double>()));
      BOOST_TEST(s["train/learning_rate"].get<float>() == as_float(summary["lr"].get<double>()));
      BOOST_TEST(s["train/samples_per_second"].get<double>() > 0);
      BOOST_TEST(s["train/gradient_norm"].get<double>() > 0);
      BOOST_TEST(s["train/skipped_steps"].get<double>() == 0);
      BOOST_TEST(!s.contains("train/loss_scale"));   // fp32 has none
      const double wait = s["train/data_wait_share"].get<double>();
      BOOST_TEST((wait >= 0 && wait <= 1));
      for (int stage = 0; stage < 2; ++stage) {
        const std::string p = "stage" + std::to_string(stage) + "/";
        const double busy = s[p + "busy_share"], comm = s[p + "communication_share"], bubble = s[p + "bubble_share"];
        BOOST_TEST((busy >= 0 && comm >= 0 && bubble >= -1e-6));
        BOOST_TEST(busy + comm + bubble == 1.0, boost::test_tools::tolerance(1e-5));
        // Measured, not made up: each stage computes in every step. The shares are of rank 0's step,
        // so on a loaded machine a stage whose own step ran longer (stage 1 updates after it sends
        // its last gradient) is clamped to all busy and no communication for that step.
        BOOST_TEST(busy > 0);
        if (comm > 0) ++communicated[static_cast<std::size_t>(stage)];
        BOOST_TEST(s[p + "peak_memory_bytes"].get<double>() > 0);
      }
      if (i > 0) BOOST_TEST(e["wall_time"].get<double>() >= list[static_cast<std::size_t>(i - 1)]["wall_time"].get<double>());
    }
  }
  // Each stage sends to its neighbour every step: it shows in some step however loaded the machine.
  for (int stage = 0; stage < 2; ++stage) BOOST_TEST(communicated[static_cast<std::size_t>(stage)] > 0);
  const auto& test = list.back();
  BOOST_TEST(test["step"] == steps);
  BOOST_TEST(test["scalars"]["test/accuracy"].get<float>() == as_float(summary["test_accuracy"].get<double>()));
}

BOOST_AUTO_TEST_CASE(the_reader_catches_a_damaged_record_and_fp16_logs_its_loss_scale) {
  ScratchDir dir("tensorboard-fp16");
  const auto folder = dir.path / "tb";
  const auto r = run_pipewright(
      "train --model seed-cnn --dataset synthetic --synthetic-size 256 --threads 1 --batch-size 16 --steps 3 "
      "--precision fp16 --eval-batches 1 --tensorboard " + folder.string());
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  const auto file = only_event_file(folder);
  const auto read = read_events(file);
  BOOST_REQUIRE_MESSAGE(read.status == 0, read.output);
  const auto events = nlohmann::json::parse(read.output);
  BOOST_TEST(events["events"][0]["scalars"]["train/loss_scale"].get<double>() == 65536.0);

  // One flipped byte in a payload: the CRC says so (the check is real, not a formality).
  std::string bytes;
  {
    std::ifstream in(file, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x20);
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
  const auto damaged = read_events(file);
  BOOST_TEST(damaged.status == 1);
  BOOST_TEST(damaged.output.find("CRC mismatch") != std::string::npos, damaged.output);
}

BOOST_AUTO_TEST_CASE(a_folder_that_cannot_be_used_is_one_line_with_status_2) {
  ScratchDir dir("tensorboard-bad");
  std::ofstream(dir.file("plain-file")) << "x";
  const auto r = run_pipewright("train --model seed-cnn --dataset synthetic --synthetic-size 64 --threads 1 "
                                "--batch-size 16 --steps 1 --tensorboard " + dir.file("plain-file"));
  BOOST_TEST(r.status == 2, r.output);
  BOOST_TEST(r.output.find("cannot use it as the TensorBoard folder") != std::string::npos, r.output);
  BOOST_TEST(r.output.find("internal error") == std::string::npos, r.output);
}

BOOST_AUTO_TEST_SUITE_END()
