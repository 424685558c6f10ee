// `pipewright train` end to end: a short run and its summary, and one-line errors for bad input.
#include <fstream>
#include <sstream>

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "tests/support/test_util.h"
#include "tests/tools/cli_runner.h"

using pw::test::run_pipewright;
using pw::test::ScratchDir;

namespace {
const std::string kQuick = "train --model seed-cnn --dataset synthetic --synthetic-size 256 ";

constexpr int kAnyFailure = -1;   // CLI11's own parse errors use its own exit codes

void check_error(const std::string& args, int status, const std::string& expected) {
  const auto r = run_pipewright(args);
  BOOST_TEST_CONTEXT(args) {
    if (status == kAnyFailure) BOOST_CHECK_NE(r.status, 0);
    else BOOST_CHECK_EQUAL(r.status, status);
    BOOST_CHECK_MESSAGE(r.output.find(expected) != std::string::npos, "output was: " << r.output);
    BOOST_CHECK_MESSAGE(r.output.find("internal error") == std::string::npos, r.output);
  }
}
}  // namespace

BOOST_AUTO_TEST_SUITE(cli)

BOOST_AUTO_TEST_CASE(short_run_writes_summary_and_weights_that_load_back) {
  ScratchDir dir("cli");
  const auto summary = dir.file("s.json");
  const auto weights = dir.file("w.safetensors");
  auto r = run_pipewright(kQuick + "--batch-size 32 --threads 2 --steps 12 --seed 3 --summary " + summary + " --save " + weights);
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  BOOST_CHECK_MESSAGE(r.output.find("step 12/12") != std::string::npos, r.output);
  std::ifstream in(summary);
  const auto j = nlohmann::json::parse(in);
  for (const char* key : {"model", "params", "device", "steps", "batch_size", "samples_per_second", "final_loss",
                          "loss_history", "test_accuracy", "wall_seconds", "peak_memory_bytes"}) {
    BOOST_CHECK_MESSAGE(j.contains(key), "summary lacks " << key);
  }
  BOOST_CHECK_EQUAL(j["model"], "seed-cnn");
  BOOST_CHECK_EQUAL(j["params"], 347146);
  BOOST_CHECK_EQUAL(j["loss_history"].size(), 12u);
  BOOST_CHECK_EQUAL(j["final_loss"], j["loss_history"].back());
  BOOST_CHECK_GT(j["peak_memory_bytes"].get<double>(), 0);

  // Same seed, same losses, bit for bit; and the saved weights load back.
  const auto summary2 = dir.file("s2.json");
  r = run_pipewright(kQuick + "--steps 12 --seed 3 --summary " + summary2 + " --load " + weights + " --batch-size 32 --threads 2");
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  const auto j2 = nlohmann::json::parse(std::ifstream(summary2));
  BOOST_CHECK_LT(j2["loss_history"][0].get<double>(), j["loss_history"][0].get<double>());

  const auto summary3 = dir.file("s3.json");
  r = run_pipewright(kQuick + "--batch-size 32 --steps 12 --seed 3 --summary " + summary3 + " --threads 2");
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  const auto j3 = nlohmann::json::parse(std::ifstream(summary3));
  BOOST_CHECK(j3["loss_history"] == j["loss_history"]);
}

BOOST_AUTO_TEST_CASE(bad_flags_and_inputs_get_one_line_errors) {
  ScratchDir dir("clibad");
  check_error("train --model resnet19", 2, "unknown model 'resnet19'; accepted: seed-cnn, resnet18");
  check_error("train --dataset cifar", 2, "unknown data set 'cifar'");
  check_error("train --optimizer rmsprop", 2, "unknown optimizer 'rmsprop'; accepted: sgd, adam, adagrad");
  check_error("train --batch-size lots", kAnyFailure, "--batch-size");
  check_error("train --frobnicate 3", kAnyFailure, "frobnicate");
  check_error("train --device gpu0", 2, "bad device 'gpu0'; expected cpu, cpu:N, cuda or cuda:N");
  check_error("train --device-memory 12 parsecs", kAnyFailure, "parsecs");
  check_error(kQuick + "--device-memory lots", 2, "bad byte size 'lots'");
  check_error(kQuick + "--steps 2 --device-memory 256KiB", 1, "out of memory on cpu:0: asked for");
  // The weights fit the cap, one batch's activations do not.
  check_error(kQuick + "--steps 2 --batch-size 64 --device-memory 8MiB", 1,
              "free of a 8.00 MiB cap; raise the device's memory cap or lower the batch size");
  check_error(kQuick + "--synthetic-shape 1x28", 2, "expected CxHxW");
  check_error(kQuick + "--batch-size 100000", 2, "larger than the 256 training samples");
  // Sizes that could never fit this host are refused before anything is allocated.
  check_error("train --model seed-cnn --dataset synthetic --synthetic-size 1000000000000000", 2,
              "--synthetic-size: 1000000000000000 samples need at least 16 bytes each");
  check_error("train --model resnet50 --dataset synthetic --synthetic-size 10000000 --batch-size 1000000", 2,
              "--batch-size: 1000000: a micro-batch of 1000000 samples at 34.43 MiB of activations each");
  check_error("train --data-dir " + dir.path.string(), 2, dir.path.string());
  check_error(kQuick + "--summary /nonexistent/dir/s.json", 2, "does not exist");
  std::ofstream(dir.file("junk.safetensors")) << "junk";
  check_error(kQuick + "--load " + dir.file("junk.safetensors"), 2, "junk.safetensors");
  check_error("", kAnyFailure, "subcommand");
  if (!pw::test::has_cuda()) check_error(kQuick + "--device cuda:0", 2, "--device: cuda:0: this machine has 0 CUDA device(s); use cpu:0");
}

BOOST_AUTO_TEST_CASE(a_failed_run_keeps_the_summary_already_written) {
  ScratchDir dir("clikeep");
  const auto summary = dir.file("s.json");
  std::ofstream(summary) << "{\"kept\": true}\n";
  const auto r = run_pipewright(kQuick + "--steps 2 --device-memory 256KiB --summary " + summary);
  BOOST_CHECK_EQUAL(r.status, 1);
  const auto j = nlohmann::json::parse(std::ifstream(summary));
  BOOST_CHECK(j.contains("kept"));
}

BOOST_AUTO_TEST_CASE(a_job_runs_from_its_json_config_and_flags_beside_it_override_fields) {
  ScratchDir dir("config");
  auto r = run_pipewright("train --print-config --model resnet18 --width 8 --schedule gpipe --stages 2 "
                          "--device-memory 1GiB --ps-optimizer adagrad --dataset synthetic --synthetic-shape 1x12x12 "
                          "--synthetic-size 64 --batch-size 16 --steps 2 --threads 1 --eval-batches 1 --seed 3");
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  const auto config = nlohmann::json::parse(r.output);
  BOOST_TEST(config["pipeline"]["schedule"] == "gpipe");
  BOOST_TEST(config["pipeline"]["stages"] == 2);
  BOOST_TEST(config["resources"]["device_memory"] == 1073741824);
  BOOST_TEST(config["ps"]["optimizer"] == "adagrad");
  BOOST_TEST(config["data"]["synthetic_shape"] == "1x12x12");
  std::ofstream(dir.file("job.json")) << config.dump(2);
  // The file alone, and the file with a flag that overrides one field.
  r = run_pipewright("train --config " + dir.file("job.json") + " --print-config --stages 3 --micro-batches 4");
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  const auto overridden = nlohmann::json::parse(r.output);
  BOOST_TEST(overridden["pipeline"]["stages"] == 3);
  BOOST_TEST(overridden["pipeline"]["schedule"] == "gpipe");
  BOOST_TEST(overridden["model"]["width"] == 8);
  r = run_pipewright("train --config " + dir.file("job.json") + " --summary " + dir.file("s.json"));
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  const auto summary = nlohmann::json::parse(std::ifstream(dir.file("s.json")));
  BOOST_TEST(summary["stages"] == 2);
  BOOST_TEST(summary["schedule"] == "gpipe");
  BOOST_TEST(summary["model"] == "resnet18");
  // Bad files and fields are named by their path, and by the flag where one sets the field.
  std::ofstream(dir.file("typo.json")) << R"({"optimizer": {"learning_rate": 0.1}})";
  check_error("train --config " + dir.file("typo.json"), 2,
              "--config " + dir.file("typo.json") + ": /optimizer/learning_rate: unknown field; optimizer has kind, lr");
  std::ofstream(dir.file("negative.json")) << R"({"optimizer": {"lr": -1}})";
  check_error("train --config " + dir.file("negative.json"), 2, "--lr: -1; must be >= 0");
  std::ofstream(dir.file("broken.json")) << "{";
  check_error("train --config " + dir.file("broken.json"), 2, "--config " + dir.file("broken.json") + ": not JSON");
  check_error("train --config " + dir.file("missing.json"), 2, "cannot open --config '" + dir.file("missing.json") + "'");
}

// The library reads neither variable; the command line gives it the folder and the token.
BOOST_AUTO_TEST_CASE(the_data_folder_and_the_servers_token_come_from_the_environment_through_the_cli) {
  ScratchDir dir("cli_env");
  const std::string binary = pw::test::pipewright_binary();
  auto r = pw::test::run_command("env PW_FASHION_MNIST_DIR=" + dir.file("nowhere") + " " + binary +
                                 " train --steps 1 --batch-size 16 --threads 1");
  BOOST_TEST(r.status == 2, r.output);
  BOOST_TEST(r.output.find(dir.file("nowhere")) != std::string::npos, r.output);
  const std::string dlrm = " train --model dlrm --dataset synthetic-clicks --steps 1 --ps-servers 127.0.0.1:9 ";
  r = pw::test::run_command("env PW_JOB_TOKEN=s3cr3t0123-456789 " + binary + dlrm + "--print-config");
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  BOOST_TEST(r.output.find("127.0.0.1:9") != std::string::npos, r.output);
  BOOST_TEST(r.output.find("s3cr3t") == std::string::npos, r.output);
  r = pw::test::run_command("env -u PW_JOB_TOKEN " + binary + dlrm);
  BOOST_TEST(r.status == 2, r.output);
  BOOST_TEST(r.output.find("PW_JOB_TOKEN: parameter servers at --ps-servers need the job token") != std::string::npos,
             r.output);
}

BOOST_AUTO_TEST_CASE(train_help_is_grouped_and_fits_100_columns) {
  const auto r = run_pipewright("train --help");
  BOOST_REQUIRE(r.status == 0);
  std::istringstream lines(r.output);
  std::string line;
  while (std::getline(lines, line)) BOOST_TEST(line.size() <= 100u, "too wide: " << line);
  for (const char* group : {"Model:", "Data:", "Optimizer:", "Pipeline:", "Replicas:", "Parameter servers:",
                            "Checkpoints:", "Numerics:", "Devices and processes:", "Output:"})
    BOOST_TEST(r.output.find(std::string("\n") + group + "\n") != std::string::npos, group);
}

BOOST_AUTO_TEST_SUITE_END()

// A CPU without AVX-512 (oneDNN told so through ONEDNN_MAX_CPU_ISA) still trains in bf16: the
// 16-bit activations go through the F32 kernels, the start line says so, and the run takes the
// same steps as on this CPU's native bf16 kernels (the same bf16 roundings; only F32 sums differ).
BOOST_AUTO_TEST_CASE(bf16_without_native_instructions_runs_through_f32_and_says_so) {
  ScratchDir dir("bf16-isa");
  const std::string args = "train --model seed-cnn --dataset synthetic --synthetic-shape 1x28x28 --synthetic-size 256 "
                           "--batch-size 32 --steps 4 --threads 2 --eval-batches 1 --precision bf16 --summary ";
  const auto native = run_pipewright(args + dir.file("native.json"));
  BOOST_REQUIRE_MESSAGE(native.status == 0, native.output);
  const auto limited = pw::test::run_command("ONEDNN_MAX_CPU_ISA=AVX2 " + pw::test::pipewright_binary() + " " + args +
                                             dir.file("avx2.json"));
  BOOST_REQUIRE_MESSAGE(limited.status == 0, limited.output);
  BOOST_CHECK_MESSAGE(limited.output.find("precision bf16 (F32 master weights); CPU bf16 via F32") != std::string::npos,
                      limited.output);
  const auto a = nlohmann::json::parse(std::ifstream(dir.file("native.json")));
  const auto b = nlohmann::json::parse(std::ifstream(dir.file("avx2.json")));
  const auto la = a["loss_history"].get<std::vector<double>>(), lb = b["loss_history"].get<std::vector<double>>();
  BOOST_REQUIRE_EQUAL(la.size(), lb.size());
  for (std::size_t i = 0; i < la.size(); ++i) BOOST_CHECK_SMALL(std::abs(la[i] - lb[i]) / la[i], 1e-2);
}
