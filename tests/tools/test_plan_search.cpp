// `pipewright plan` through train's JobConfig path: its memory prediction by kind against a real
// run's summary, `--search` ranking only the layouts that fit, `--write-config` giving a file that
// `pipewright train --config` runs, and one-line errors.
#include <cmath>
#include <fstream>

#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "tests/tools/cli_runner.h"

using pw::test::run_pipewright;
using pw::test::ScratchDir;

namespace {

const std::string kJob = "--model seed-cnn --dataset synthetic --synthetic-size 256 --batch-size 32 --optimizer adam ";
const std::string kSearch = "plan --search " + kJob + "--threads 2 --repeats 1 ";

nlohmann::json json_of(const std::string& args) {
  const auto r = run_pipewright(args);
  BOOST_REQUIRE_MESSAGE(r.status == 0, args << ": " << r.output);
  // The search's progress line goes to stderr only without --json.
  return nlohmann::json::parse(r.output);
}

void check_error(const std::string& args, const std::string& expected) {
  const auto r = run_pipewright(args);
  BOOST_TEST_CONTEXT(args) {
    BOOST_CHECK_EQUAL(r.status, 2);
    BOOST_CHECK_MESSAGE(r.output.find(expected) != std::string::npos, "output was: " << r.output);
    BOOST_CHECK_MESSAGE(r.output.find('\n') == r.output.size() - 1, "not one line: " << r.output);
  }
}

// The summary's measured `memory` of a short run of `shape` and plan's predicted `memory` of it.
struct MeasuredAndPredicted {
  nlohmann::json measured, predicted;
};
MeasuredAndPredicted memory_of(const ScratchDir& dir, const std::string& shape, const std::string& name) {
  const auto summary = dir.file(name + ".json");
  const auto r = run_pipewright("train " + shape + " --eval-batches 1 --summary " + summary);
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  return {nlohmann::json::parse(std::ifstream(summary))["memory"],
          json_of("plan " + shape + " --partition uniform --repeats 1 --threads 2 --json")["memory"]};
}

double relative_error(std::int64_t predicted, std::int64_t measured) {
  return std::abs(static_cast<double>(predicted - measured)) / static_cast<double>(measured);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(plan_search_cli)

// The prediction by kind beside the summary's measured `memory` of the same job (2 stages, 4
// micro-batches, Adam): every stage's peak within 10%, and so is every kind that makes up at least
// a twentieth of it (smaller kinds are a few allocator blocks). Under ZB-H1 the last stage's peak
// is its update, which keeps a copy of its weights and Adam state until the step's verdict
// (workspace), and the first stage holds micro-batches from their input halves until their weight
// halves, each with its layers' output gradients.
BOOST_AUTO_TEST_CASE(memory_by_kind_is_within_ten_percent_of_a_measured_run) {
  ScratchDir dir("planmem");
  int run = 0;
  for (const std::string layout : {"--precision fp32", "--precision bf16", "--precision fp32 --schedule zb-h1",
                                   "--precision bf16 --schedule zb-h1"}) {
    const auto [measured, predicted] =
        memory_of(dir, kJob + "--stages 2 --micro-batches 4 --steps 2 " + layout, "run" + std::to_string(run++));
    BOOST_REQUIRE_EQUAL(measured.size(), 2u);
    BOOST_REQUIRE_EQUAL(predicted.size(), 2u);
    for (std::size_t s = 0; s < 2; ++s) {
      BOOST_TEST_CONTEXT(layout << " stage " << s << ": predicted " << predicted[s].dump() << ", measured "
                                   << measured[s].dump()) {
        const auto peak = measured[s]["peak_bytes"].get<std::int64_t>();
        BOOST_TEST(relative_error(predicted[s]["peak_bytes"].get<std::int64_t>(), peak) <= 0.10);
        for (const auto& [kind, bytes] : measured[s]["by_kind"].items()) {
          const auto m = bytes.get<std::int64_t>();
          if (m * 20 < peak) continue;
          BOOST_TEST_CONTEXT(kind) { BOOST_TEST(relative_error(predicted[s]["by_kind"][kind].get<std::int64_t>(), m) <= 0.10); }
        }
      }
    }
  }
}

// With replicas on CPU devices, every replica's loader batches are memory of cpu:0: the first
// stage's rank of replica 0 holds them and is predicted with them (peak_bytes), its other replicas'
// ranks without (other_replicas_peak_bytes); the last stage is the same on every replica. Each
// rank of a measured 2 x 2 run is within 10% of its prediction.
BOOST_AUTO_TEST_CASE(replicas_other_than_the_first_are_predicted_without_the_loader_batches) {
  ScratchDir dir("planreplicas");
  const auto [measured, predicted] = memory_of(dir, kJob + "--stages 2 --replicas 2 --micro-batches 2 --steps 2 ", "run");
  BOOST_REQUIRE_EQUAL(measured.size(), 4u);
  BOOST_REQUIRE_EQUAL(predicted.size(), 2u);
  BOOST_TEST(predicted[0]["other_replicas_peak_bytes"].get<std::int64_t>() < predicted[0]["peak_bytes"].get<std::int64_t>());
  BOOST_TEST(predicted[1]["other_replicas_peak_bytes"] == predicted[1]["peak_bytes"]);
  for (const auto& rank : measured) {
    const int index = rank["rank"].get<int>();   // replica-major: replica * stages + stage
    const auto& stage = predicted[static_cast<std::size_t>(index % 2)];
    const auto p = stage[index < 2 ? "peak_bytes" : "other_replicas_peak_bytes"].get<std::int64_t>();
    BOOST_TEST_CONTEXT("rank " << index << ": predicted " << stage.dump() << ", measured " << rank.dump()) {
      BOOST_TEST(relative_error(p, rank["peak_bytes"].get<std::int64_t>()) <= 0.10);
    }
  }
}

// Replicas, precision and sharding are part of the plan: sharded Adam state is a quarter on each of
// 4 replicas, and bf16 adds fp32 master weights.
BOOST_AUTO_TEST_CASE(the_plan_predicts_replicas_precision_and_sharding) {
  const std::string plan = "plan " + kJob + "--stages 2 --micro-batches 2 --partition uniform --repeats 1 --threads 2 --json ";
  const auto replicated = json_of(plan + "--replicas 4");
  const auto sharded = json_of(plan + "--replicas 4 --shard-optimizer");
  const auto bf16 = json_of(plan + "--precision bf16");
  BOOST_CHECK_EQUAL(sharded["replicas"], 4);
  BOOST_CHECK_EQUAL(sharded["optimizer_state"], "sharded");
  const auto& last_replicated = replicated["memory"][1]["by_kind"];
  const auto& last_sharded = sharded["memory"][1]["by_kind"];
  const auto state = last_replicated["optimizer_state"].get<std::int64_t>();
  BOOST_TEST(state > 0);
  // (Each replica's slice of a tensor is rounded up to the allocator's block on its own.)
  BOOST_TEST(relative_error(4 * last_sharded["optimizer_state"].get<std::int64_t>(), state) < 0.05);
  // The replicas' buckets are the gradients' only home, counted as gradients.
  BOOST_TEST(relative_error(last_replicated["gradients"].get<std::int64_t>(), state / 2) < 0.05);
  BOOST_TEST(bf16["memory"][1]["by_kind"]["master_weights"].get<std::int64_t>() > 0);
  BOOST_TEST(replicated["memory"][1]["by_kind"]["master_weights"].get<std::int64_t>() == 0);
  BOOST_TEST(replicated["predicted_step_seconds"].get<double>() > replicated["step_seconds"].get<double>());
}

BOOST_AUTO_TEST_CASE(search_ranks_only_fitting_layouts_and_a_tight_cap_removes_the_big_ones) {
  const auto open = json_of(kSearch + "--devices 4 --top 1000 --json");
  const auto& all = open["layouts"];
  BOOST_REQUIRE_GT(all.size(), 10u);
  BOOST_CHECK_EQUAL(all.size(), open["fitting"].get<std::size_t>());
  std::int64_t smallest = all[0]["peak_bytes"].get<std::int64_t>(), largest = smallest;
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (i > 0) BOOST_CHECK_LE(all[i - 1]["step_seconds"].get<double>(), all[i]["step_seconds"].get<double>());
    BOOST_CHECK_LE(all[i]["stages"].get<int>() * all[i]["replicas"].get<int>(), 4);
    smallest = std::min(smallest, all[i]["peak_bytes"].get<std::int64_t>());
    largest = std::max(largest, all[i]["peak_bytes"].get<std::int64_t>());
  }
  BOOST_REQUIRE_LT(smallest, largest);
  const std::int64_t cap = (smallest + largest) / 2;
  const auto capped = json_of(kSearch + "--devices 4 --top 1000 --json --device-memory " + std::to_string(cap) + "B");
  BOOST_CHECK_GT(capped["layouts"].size(), 0u);
  BOOST_CHECK_LT(capped["layouts"].size(), all.size());
  for (std::size_t i = 0; i < capped["layouts"].size(); ++i) {
    const auto& l = capped["layouts"][i];
    BOOST_CHECK_LE(l["peak_bytes"].get<std::int64_t>(), cap);
    for (const auto& stage : l["memory"]) BOOST_CHECK_LE(stage["peak_bytes"].get<std::int64_t>(), cap);
    if (i > 0) BOOST_CHECK_LE(capped["layouts"][i - 1]["step_seconds"].get<double>(), l["step_seconds"].get<double>());
  }
  check_error(kSearch + "--devices 4 --device-memory 64KiB --json",
              "pipewright: error: no layout of seed-cnn on 4 devices fits a 64.00 KiB cap per device: the smallest "
              "predicted peak of the ");
}

// The best layout's config trains as written, and is the config train reads back.
BOOST_AUTO_TEST_CASE(write_config_gives_a_job_that_train_runs) {
  ScratchDir dir("plansearch");
  const auto config = dir.file("best.json");
  const auto r = run_pipewright(kSearch + "--devices 2 --device-memory 8MiB --schedule 1f1b --write-config " + config);
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  BOOST_CHECK_MESSAGE(r.output.find("1. ") != std::string::npos && r.output.find("wrote layout 1 to") != std::string::npos,
                      r.output);
  const auto written = nlohmann::json::parse(std::ifstream(config));
  const auto printed = run_pipewright("train --config " + config + " --print-config");
  BOOST_REQUIRE_MESSAGE(printed.status == 0, printed.output);
  BOOST_CHECK_EQUAL(nlohmann::json::parse(printed.output), written);
  const auto summary = dir.file("summary.json");
  const auto trained = run_pipewright("train --config " + config + " --steps 2 --eval-batches 1 --summary " + summary);
  BOOST_REQUIRE_MESSAGE(trained.status == 0, trained.output);
  const auto s = nlohmann::json::parse(std::ifstream(summary));
  BOOST_CHECK_EQUAL(s["loss_history"].size(), 2u);
  BOOST_CHECK_EQUAL(s["memory"].size(),
                    static_cast<std::size_t>(written["pipeline"]["stages"].get<int>() *
                                             written["replicas"]["replicas"].get<int>()));
  for (const auto& rank : s["memory"]) BOOST_CHECK_LE(rank["peak_bytes"].get<std::int64_t>(), 8 << 20);
}

// Under caps below the open search's largest peaks, some layouts fit only when one of their stages
// recomputes: the search turns it on for that stage alone. The layout's config says so, and train
// --config runs it and reports the same choice.
BOOST_AUTO_TEST_CASE(recomputation_is_chosen_per_stage_and_the_config_trains) {
  const std::string search = kSearch + "--devices 4 --top 1000 --json ";
  const auto open = json_of(search);
  std::int64_t largest = 0;
  for (const auto& l : open["layouts"]) {
    BOOST_CHECK_EQUAL(l["recompute"], "none");   // everything fits without a cap
    largest = std::max(largest, l["peak_bytes"].get<std::int64_t>());
  }
  nlohmann::json capped, chosen;
  for (const double fraction : {0.4, 0.3, 0.5, 0.25, 0.6, 0.2}) {
    const auto cap = static_cast<std::int64_t>(fraction * static_cast<double>(largest));
    const auto r = run_pipewright(search + "--device-memory " + std::to_string(cap) + "B");
    if (r.status != 0) continue;   // nothing fits this cap
    capped = nlohmann::json::parse(r.output);
    for (const auto& l : capped["layouts"]) {
      BOOST_CHECK_LE(l["peak_bytes"].get<std::int64_t>(), cap);
      if (l["recompute"].get<std::string>().find(',') != std::string::npos) chosen = l;
    }
    if (!chosen.is_null()) break;
  }
  BOOST_REQUIRE_MESSAGE(!chosen.is_null(), "no cap gave a layout recomputing some stages only: " << capped.dump());
  const auto& pipeline = chosen["config"]["pipeline"];
  BOOST_REQUIRE(pipeline["recompute"].is_array());
  BOOST_CHECK_EQUAL(pipeline["recompute"].size(), pipeline["stages"].get<std::size_t>());
  ScratchDir dir("planrecompute");
  const auto config = dir.file("chosen.json");
  auto written = chosen["config"];
  written["resources"]["device_memory"] = 0;   // the cap is the prediction's; a run may be a few % above it
  std::ofstream(config) << written.dump(2);
  const auto summary = dir.file("summary.json");
  const auto trained = run_pipewright("train --config " + config + " --steps 2 --eval-batches 1 --summary " + summary);
  BOOST_REQUIRE_MESSAGE(trained.status == 0, trained.output);
  const auto s = nlohmann::json::parse(std::ifstream(summary));
  BOOST_CHECK_EQUAL(s["recompute"], chosen["recompute"]);
  BOOST_CHECK_EQUAL(s["loss_history"].size(), 2u);
}

// Without --search, --devices is the job's device list as train takes it (a train command's flags
// plan as they are): the layers are profiled on the first, and the memory is the same as on --device.
BOOST_AUTO_TEST_CASE(without_search_devices_is_the_jobs_device_list) {
  const std::string shape = "plan " + kJob + "--stages 2 --partition uniform --repeats 1 --threads 2 --json ";
  const auto listed = json_of(shape + "--devices cpu:1,cpu:0");
  const auto single = json_of(shape + "--device cpu:1");
  BOOST_CHECK_EQUAL(listed["device"], "cpu:1");
  BOOST_CHECK_EQUAL(listed["stages"], 2);
  for (int stage = 0; stage < 2; ++stage)   // the memory (the times are measured anew)
    BOOST_CHECK_EQUAL(listed["memory"][stage]["by_kind"].dump(), single["memory"][stage]["by_kind"].dump());
}

BOOST_AUTO_TEST_CASE(bad_search_flags_get_one_line_errors) {
  check_error(kSearch, "pipewright: error: --search needs --devices N");
  check_error(kSearch + "--devices 4 --stages 2", "pipewright: error: --stages: --search chooses the layout itself");
  check_error(kSearch + "--devices 4 --nodes 3", "pipewright: error: --nodes 3: 4 devices do not split evenly");
  check_error("plan " + kJob + "--devices 4", "--devices 4 requires --search");
  check_error(kSearch + "--devices cpu:0,cpu:1", "--search --devices takes how many devices");
  check_error("plan " + kJob + "--devices cpu:0,gpu:1", "--devices: ");
  check_error("plan " + kJob + "--stages 2 --devices cpu:0,cpu:1,cpu:2", "--devices: 3 devices for 2 stages");
  check_error(kSearch + "--devices 0", "--devices: got 0");
  check_error(kSearch + "--devices 4 --recompute all,none",
              "pipewright: error: --recompute all,none: --search chooses the stage count, so it takes one of none, all, "
              "except-last for every stage");
}

BOOST_AUTO_TEST_SUITE_END()
