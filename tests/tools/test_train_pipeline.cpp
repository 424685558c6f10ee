// `pipewright train` as a pipeline: the summary's pipeline fields, equality with single-device
// training, and one-line errors for bad pipeline flags.
#include <fstream>

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "tests/tools/cli_runner.h"

using pw::test::run_pipewright;
using pw::test::ScratchDir;

namespace {
const std::string kQuick =
    "train --model seed-cnn --dataset synthetic --synthetic-size 256 --batch-size 32 --optimizer sgd --seed 4 "
    "--eval-batches 1 ";

nlohmann::json train(const ScratchDir& dir, const std::string& name, const std::string& args) {
  const auto summary = dir.file(name);
  const auto r = run_pipewright(kQuick + args + " --summary " + summary);
  BOOST_REQUIRE_MESSAGE(r.status == 0, args << ": " << r.output);
  return nlohmann::json::parse(std::ifstream(summary));
}
}  // namespace

BOOST_AUTO_TEST_SUITE(train_pipeline)

// The summary's memory report: every rank's peak and what it held then, by kind. Weights and their
// gradients have the same shapes, and Adam keeps two tensors of state per weight, so those kinds
// stand in fixed ratios (up to the allocator's block rounding); under bf16 the fp32 weights become master weights. (The peak is the
// largest since the job started: a stage with small activations may reach it while setting up.)
BOOST_AUTO_TEST_CASE(the_summary_reports_each_ranks_peak_memory_by_kind) {
  ScratchDir dir("memkind");
  for (const std::string precision : {"fp32", "bf16"}) {
    const auto path = dir.file(precision + ".json");
    const auto r = run_pipewright("train --model seed-cnn --dataset synthetic --synthetic-size 256 --batch-size 32 "
                                  "--optimizer adam --steps 2 --stages 2 --micro-batches 4 --eval-batches 1 "
                                  "--precision " + precision + " --summary " + path);
    BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
    const auto memory = nlohmann::json::parse(std::ifstream(path))["memory"];
    BOOST_REQUIRE_EQUAL(memory.size(), 2u);
    for (const auto& rank : memory) {
      BOOST_TEST_CONTEXT(precision << " rank " << rank["rank"]) {
        const auto& k = rank["by_kind"];
        std::int64_t sum = 0;
        for (const auto& [name, bytes] : k.items()) sum += bytes.get<std::int64_t>();
        BOOST_TEST(sum == rank["peak_bytes"].get<std::int64_t>());
        const auto gradients = k["gradients"].get<std::int64_t>();
        BOOST_TEST(gradients > 0);
        // Blocks are counted as allocated: a cached block up to twice the size asked for may serve.
        BOOST_TEST(k["optimizer_state"].get<std::int64_t>() >= 2 * gradients);
        BOOST_TEST(k["optimizer_state"].get<std::int64_t>() <= 4 * gradients);
        if (precision == "fp32") {
          BOOST_TEST(k["parameters"].get<std::int64_t>() == gradients);
          BOOST_TEST(k["master_weights"].get<std::int64_t>() == 0);
          BOOST_TEST(k["activations"].get<std::int64_t>() > 0);
        } else {
          BOOST_TEST(k["master_weights"].get<std::int64_t>() > 0);
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(pipeline_runs_match_the_single_device_run_and_report_stages) {
  ScratchDir dir("pipe");
  const auto single = train(dir, "single.json", "--steps 6");
  for (const std::string args : {"--stages 2 --micro-batches 4 --schedule gpipe", "--stages 3 --micro-batches 4",
                                 "--stages 2 --micro-batches 4 --schedule interleaved --chunks 2",
                                 "--split 4 --micro-batches 8 --schedule zb-h1 --recompute all",
                                 "--stages 2 --micro-batches 4 --schedule zb-h2 --recompute all",
                                 "--stages 3 --micro-batches 4 --recompute all,none,all",
                                 "--stages 2 --micro-batches 2 --partition params --devices cpu:3,cpu:5"}) {
    BOOST_TEST_CONTEXT(args) {
      const auto j = train(dir, "pipe.json", "--steps 6 " + args);
      const auto& a = j["loss_history"];
      const auto& b = single["loss_history"];
      BOOST_REQUIRE_EQUAL(a.size(), b.size());
      for (std::size_t i = 0; i < a.size(); ++i)
        BOOST_CHECK_SMALL(std::abs(a[i].get<double>() - b[i].get<double>()) / b[i].get<double>(), 1e-5);
      const int stages = j["stages"].get<int>();
      BOOST_CHECK_EQUAL(j["stage_peak_memory_bytes"].size(), static_cast<std::size_t>(stages));
      BOOST_CHECK_EQUAL(j["stage_busy_fraction"].size(), static_cast<std::size_t>(stages));
      BOOST_CHECK_EQUAL(j["split"].size(), static_cast<std::size_t>(stages * j["chunks"].get<int>() - 1));
      for (const auto& f : j["stage_busy_fraction"]) BOOST_CHECK(f.get<double>() > 0.0 && f.get<double>() <= 1.0);
      for (const auto& m : j["stage_peak_memory_bytes"]) BOOST_CHECK_GT(m.get<double>(), 0);
      BOOST_CHECK(j.contains("micro_batches") && j.contains("schedule"));
    }
  }
  const auto split = train(dir, "split.json", "--steps 1 --split 2,5 --micro-batches 4");
  BOOST_CHECK_EQUAL(split["stages"], 3);
  BOOST_CHECK(split["split"] == nlohmann::json({2, 5}));
  BOOST_CHECK_EQUAL(split["schedule"], "1f1b");
}

BOOST_AUTO_TEST_CASE(v_schedules_train_like_the_single_device_run) {
  ScratchDir dir("pipev");
  const auto single = train(dir, "single.json", "--steps 4");
  for (const std::string kind : {"zb-v", "v-half", "v-min", "dualpipev"}) {
    BOOST_TEST_CONTEXT(kind) {
      const auto j = train(dir, "v.json", "--steps 4 --stages 2 --micro-batches 4 --schedule " + kind);
      BOOST_CHECK_EQUAL(j["schedule"], kind);
      BOOST_CHECK_EQUAL(j["chunks"], 2);
      const auto& a = j["loss_history"];
      const auto& b = single["loss_history"];
      BOOST_REQUIRE_EQUAL(a.size(), b.size());
      for (std::size_t i = 0; i < a.size(); ++i)
        BOOST_CHECK_SMALL(std::abs(a[i].get<double>() - b[i].get<double>()) / b[i].get<double>(), 1e-5);
    }
  }
}

BOOST_AUTO_TEST_CASE(stages_linked_by_thrift_on_loopback_match_in_process_links_bitwise) {
  ScratchDir dir("pipethrift");
  const std::string args = "--steps 4 --stages 3 --micro-batches 4 --threads 1 ";
  const auto memory = train(dir, "memory.json", args);
  const auto thrift = train(dir, "thrift.json", args + "--transport thrift");
  BOOST_TEST(memory["transport"] == "inprocess");
  BOOST_TEST(thrift["transport"] == "thrift");
  BOOST_TEST(memory["loss_history"] == thrift["loss_history"]);
  BOOST_TEST(memory["test_loss"] == thrift["test_loss"]);
}

BOOST_AUTO_TEST_CASE(pipeline_weights_save_and_load_like_single_device_ones) {
  ScratchDir dir("pipesave");
  const auto weights = dir.file("w.safetensors");
  train(dir, "a.json", "--steps 2 --stages 2 --micro-batches 2 --save " + weights);
  // The file is one whole model: the single-device trainer loads it.
  const auto j = train(dir, "b.json", "--steps 1 --load " + weights);
  const auto k = train(dir, "c.json", "--steps 1 --stages 3 --micro-batches 4 --load " + weights);
  BOOST_CHECK_SMALL(std::abs(j["loss_history"][0].get<double>() - k["loss_history"][0].get<double>()), 1e-5);
  // A checkpoint of another model is refused, split or not.
  const auto other = dir.file("other.safetensors");
  const auto r = run_pipewright("train --model resnet18 --width 4 --dataset synthetic --synthetic-size 64 --steps 1 "
                                "--batch-size 16 --eval-batches 1 --save " + other);
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  const auto bad = run_pipewright(kQuick + "--steps 1 --stages 2 --micro-batches 2 --load " + other);
  BOOST_CHECK_EQUAL(bad.status, 2);
  BOOST_CHECK_MESSAGE(bad.output.find("is it a checkpoint of this model?") != std::string::npos ||
                          bad.output.find("but the model needs") != std::string::npos,
                      bad.output);
}

BOOST_AUTO_TEST_CASE(bad_pipeline_flags_get_one_line_errors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--stages 20", "--stages: 20 stages: seed-cnn has only 7 layers, so at most 7 stages"},
      {"--split 5,3", "--split: 5,3: split points must be strictly increasing layer indices in 1..6"},
      {"--split 2,99", "--split: 2,99: split points must be strictly increasing"},
      {"--stages 2 --schedule zigzag", "unknown schedule 'zigzag'; accepted: gpipe, 1f1b, interleaved, zb-h1, zb-h2, zb-v, v-half, v-min, interleaved-zb, dualpipev"},
      {"--stages 4 --micro-batches 2", "2 micro-batches for 4 stages"},
      {"--stages 2 --micro-batches 3", "--batch-size: 32 does not split into 3 equal micro-batches"},
      {"--stages 2 --devices cpu:0", "--devices: 1 devices for 2 stages"},
      {"--stages 2 --recompute some", "--recompute: unknown recompute mode 'some'; accepted: none, all, except-last"},
      {"--stages 2 --recompute none,some", "--recompute: 'none,some': stage 1 is 'some'; expected one entry per stage, each none or all"},
      {"--stages 2 --recompute none,all,all",
       "--recompute: 3 entries for 2 stages; expected one entry per stage (each none or all), or one of none, all, except-last"},
      {"--stages 2 --partition magic", "--partition: unknown partition method 'magic'; accepted: uniform, params, profile"},
      {"--stages 3 --split 3", "--split: 3 makes 2 pieces but --stages 3"},
      {"--stages 2 --schedule interleaved --chunks 1", "interleaved"},
      {"--stages 2 --save /tmp", "save path /tmp is a folder; give a file name"},
      {"--stages 2 --transport nccl", "--transport: nccl: the stages of this job share one process"},
      {"--stages 2 --transport pigeon", "--transport: unknown transport 'pigeon'; accepted: auto, inprocess, thrift, nccl"},
  };
  // CLI11 checks ranges itself, with its own exit code.
  const auto huge = run_pipewright(kQuick + "--steps 1 --stages 2 --stage-timeout 1e30");
  BOOST_CHECK_NE(huge.status, 0);
  BOOST_CHECK_MESSAGE(huge.output.find("--stage-timeout") != std::string::npos, huge.output);
  for (const auto& [args, expected] : cases) {
    const auto r = run_pipewright(kQuick + "--steps 1 " + args);
    BOOST_TEST_CONTEXT(args) {
      BOOST_CHECK_EQUAL(r.status, 2);
      BOOST_CHECK_MESSAGE(r.output.find(expected) != std::string::npos, r.output);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
