// `pipewright plan` end to end: the JSON plan of a small ResNet, the text report, and one-line
// errors for bad input.
#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "tests/tools/cli_runner.h"

using pw::test::run_pipewright;

namespace {
const std::string kSmall =
    "plan --model resnet18 --width 8 --dataset synthetic --synthetic-shape 3x16x16 --threads 2 --repeats 1 ";

nlohmann::json plan_json(const std::string& args) {
  const auto r = run_pipewright(kSmall + args + " --json");
  BOOST_REQUIRE_MESSAGE(r.status == 0, args << ": " << r.output);
  return nlohmann::json::parse(r.output);
}

void check_split_covers_all_layers(const nlohmann::json& j) {
  const auto& split = j["split"];
  BOOST_REQUIRE_EQUAL(split.size(), static_cast<std::size_t>(j["stages"].get<int>() * j["chunks"].get<int>()));
  int expected = 0;
  for (std::size_t v = 0; v < split.size(); ++v) {
    const auto& s = split[v];
    BOOST_CHECK_EQUAL(s["begin"].get<int>(), expected);
    BOOST_CHECK_GT(s["end"].get<int>(), s["begin"].get<int>());
    BOOST_CHECK_EQUAL(s["layer_names"].size(), static_cast<std::size_t>(s["end"].get<int>() - s["begin"].get<int>()));
    BOOST_CHECK_EQUAL(s["first_layer"], s["layer_names"].front());
    BOOST_CHECK_EQUAL(s["last_layer"], s["layer_names"].back());
    BOOST_CHECK_EQUAL(s["stage"].get<int>(), static_cast<int>(v) % j["stages"].get<int>());
    BOOST_CHECK_GT(s["step_seconds"].get<double>(), 0.0);
    BOOST_CHECK_GT(s["memory_bytes"].get<double>(), 0.0);
    expected = s["end"].get<int>();
  }
  BOOST_CHECK_EQUAL(expected, j["layers"].get<int>());
  BOOST_CHECK_EQUAL(split.front()["first_layer"], "conv1");
  BOOST_CHECK_EQUAL(split.back()["last_layer"], "fc");
  const double bubble = j["bubble_fraction"].get<double>();
  BOOST_CHECK_GE(bubble, 0.0);
  BOOST_CHECK_LT(bubble, 1.0);
  BOOST_CHECK_GT(j["step_seconds"].get<double>(), 0.0);
}

void check_error(const std::string& args, const std::string& expected) {
  const auto r = run_pipewright(args);
  BOOST_TEST_CONTEXT(args) {
    BOOST_CHECK_NE(r.status, 0);
    BOOST_CHECK_MESSAGE(r.output.find(expected) != std::string::npos, "output was: " << r.output);
    BOOST_CHECK_MESSAGE(r.output.find("internal error") == std::string::npos, r.output);
  }
}
}  // namespace

BOOST_AUTO_TEST_SUITE(plan_cli)

// --shard-optimizer --replicas 4: each stage's device holds a quarter of Adam's two state tensors (the
// batch is global, as for train: 16 over 4 replicas of 2 micro-batches).
BOOST_AUTO_TEST_CASE(sharded_optimizer_state_divides_the_state_memory_by_the_replicas) {
  const std::string shape = "--stages 2 --micro-batches 2 --batch-size 16 --partition params --optimizer adam";
  const auto replicated = plan_json(shape + " --replicas 4");
  const auto sharded = plan_json(shape + " --replicas 4 --shard-optimizer");
  BOOST_CHECK_EQUAL(replicated["optimizer_shards"], 1);
  BOOST_CHECK_EQUAL(sharded["optimizer_shards"], 4);
  for (std::size_t i = 0; i < 2; ++i) {
    const auto state = 2 * 4 * replicated["split"][i]["parameters"].get<std::int64_t>();   // F32 exp_avg, exp_avg_sq
    BOOST_TEST(replicated["split"][i]["weight_bytes"].get<std::int64_t>() -
                   sharded["split"][i]["weight_bytes"].get<std::int64_t>() ==
               state - (state + 3) / 4);
  }
}

BOOST_AUTO_TEST_CASE(profile_plan_as_json) {
  const auto j = plan_json("--stages 3 --micro-batches 6 --batch-size 12 --schedule 1f1b --device-memory 64MiB");
  BOOST_CHECK_EQUAL(j["model"], "resnet18");
  BOOST_CHECK_EQUAL(j["stages"], 3);
  BOOST_CHECK_EQUAL(j["micro_batches"], 6);
  BOOST_CHECK_EQUAL(j["micro_batch_size"], 2);
  BOOST_CHECK_EQUAL(j["partition"], "profile");
  BOOST_CHECK_EQUAL(j["layers"], 14);
  BOOST_CHECK_EQUAL(j["device_memory"], 64 * 1024 * 1024);
  BOOST_CHECK(j["fits"].get<bool>());
  check_split_covers_all_layers(j);
  std::int64_t params = 0;
  for (const auto& s : j["split"]) params += s["parameters"].get<std::int64_t>();
  BOOST_CHECK_EQUAL(params, j["parameters"].get<std::int64_t>());
}

BOOST_AUTO_TEST_CASE(every_method_and_schedule_plans) {
  check_split_covers_all_layers(plan_json("--stages 2 --micro-batches 4 --partition uniform --schedule gpipe"));
  check_split_covers_all_layers(plan_json("--stages 4 --micro-batches 4 --partition params --schedule zb-h1"));
  check_split_covers_all_layers(plan_json("--stages 2 --micro-batches 4 --schedule interleaved --recompute all"));
  const auto j = plan_json("--split 3,7,12 --micro-batches 8 --optimizer sgd");
  BOOST_CHECK_EQUAL(j["stages"], 4);
  BOOST_CHECK_EQUAL(j["partition"], "split 3,7,12");
  BOOST_CHECK_EQUAL(j["split"][1]["begin"], 3);
  BOOST_CHECK_EQUAL(j["split"][3]["begin"], 12);
  check_split_covers_all_layers(j);
}

BOOST_AUTO_TEST_CASE(text_report_names_stages_step_time_and_bubble) {
  const auto r = run_pipewright(kSmall + "--stages 2 --micro-batches 4 --device-memory 1GiB");
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  for (const char* text : {"plan: resnet18", "schedule 1f1b, 2 stages, 4 micro-batches", "first .. last", "conv1 .. ",
                           " .. fc", "of 1.00 GiB", "predicted step time", "bubble fraction"}) {
    BOOST_CHECK_MESSAGE(r.output.find(text) != std::string::npos, "no '" << text << "' in: " << r.output);
  }
}

BOOST_AUTO_TEST_CASE(compare_schedules_has_a_row_per_kind) {
  const auto r = run_pipewright(kSmall + "--stages 2 --micro-batches 4 --batch-size 8 --compare-schedules");
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  BOOST_CHECK_MESSAGE(r.output.find("schedules on this layout (2 stages, 4 micro-batches, recompute none") !=
                          std::string::npos, r.output);
  for (const char* kind : {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "v-half", "v-min",
                           "interleaved-zb", "dualpipev"}) {
    BOOST_CHECK_MESSAGE(r.output.find("\n" + std::string(kind) + " ") != std::string::npos, "no row " << kind);
  }
  const auto j = plan_json("--stages 2 --micro-batches 4 --batch-size 8 --compare-schedules");
  const auto& rows = j["schedules"];
  BOOST_REQUIRE_EQUAL(rows.size(), 10u);
  for (const auto& row : rows) {
    BOOST_TEST_CONTEXT(row.dump()) {
      if (!row["available"].get<bool>()) {
        BOOST_CHECK(row["reason"].get<std::string>().find('\n') == std::string::npos);
        continue;
      }
      BOOST_CHECK_GT(row["step_seconds"].get<double>(), 0.0);
      BOOST_CHECK_EQUAL(row["peak_activation_bytes"].size(), 2u);
      BOOST_CHECK_EQUAL(row["parameter_copies"], 1);
    }
  }
  // The table's 1f1b row is the plan's own simulation.
  BOOST_CHECK_EQUAL(rows[1]["schedule"], "1f1b");
  BOOST_CHECK_CLOSE(rows[1]["step_seconds"].get<double>(), j["step_seconds"].get<double>(), 1e-9);
  BOOST_CHECK_EQUAL(rows[1]["messages_per_micro_batch"], 2.0);
  for (const int i : {4, 8}) BOOST_CHECK(rows[static_cast<std::size_t>(i)]["available"].get<bool>());   // zb-h2, interleaved-zb
}

BOOST_AUTO_TEST_CASE(compare_schedules_gives_each_kind_that_cannot_run_its_reason) {
  const auto j = plan_json("--stages 2 --micro-batches 1 --batch-size 8 --schedule gpipe --compare-schedules");
  for (const auto& row : j["schedules"]) {
    BOOST_TEST_CONTEXT(row.dump()) {
      if (row["schedule"] == "gpipe") {
        BOOST_CHECK(row["available"].get<bool>());
      } else {
        BOOST_CHECK_EQUAL(row["reason"], row["schedule"].get<std::string>() +
                                             " schedule: 1 micro-batches for 2 stages; it needs at least one per stage "
                                             "(micro-batches >= stages), gpipe takes fewer");
      }
    }
  }
  const auto split = plan_json("--split 7 --micro-batches 4 --batch-size 8 --compare-schedules");
  BOOST_CHECK_EQUAL(split["schedules"][8]["reason"], "the split makes 2 pieces; interleaved-zb needs 2 x 2 = 4");
  check_error(kSmall + "--stages 3 --micro-batches 2 --batch-size 8 --compare-schedules",
              "pipewright: error: 1f1b schedule: 2 micro-batches for 3 stages");
}

BOOST_AUTO_TEST_CASE(bad_inputs_get_one_line_errors) {
  check_error(kSmall + "--stages 0", "pipewright: error: --stages: got 0; expected a whole number from 1 to 4096");
  check_error(kSmall + "--stages 15 --micro-batches 15 --batch-size 15",
              "pipewright: error: --stages: 15 stages: resnet18 has only 14 layers, so at most 14 stages");
  check_error(kSmall + "--split 7,3",
              "pipewright: error: --split: 7,3: split points must be strictly increasing layer indices in 1..13 (resnet18 has 14 layers)");
  check_error(kSmall + "--split 3,x", "pipewright: error: --split: bad split points '3,x'; expected comma-separated layer indices");
  check_error(kSmall + "--split 3,7 --stages 2", "pipewright: error: --split: 3,7 makes 3 pieces but --stages 2 x --chunks 1 needs 2");
  check_error(kSmall + "--stages 2 --partition greedy",
              "pipewright: error: --partition: unknown partition method 'greedy'; accepted: uniform, params, profile");
  check_error(kSmall + "--stages 2 --schedule pipedream", "pipewright: error: --schedule: unknown schedule 'pipedream'");
  check_error(kSmall + "--stages 2 --micro-batches 4 --batch-size 6",
              "pipewright: error: --batch-size: 6 does not split into 4 equal micro-batches");
  check_error(kSmall + "--stages 2 --recompute some", "pipewright: error: --recompute: unknown recompute mode 'some'; accepted: none, all, except-last");
  check_error(kSmall + "--stages 2 --device-memory lots", "pipewright: error: --device-memory: bad byte size 'lots'");
  check_error(kSmall + "--partition params --split 3", "excludes");
  check_error(kSmall + "--stages 2 --micro-batches 2 --batch-size 64 --device-memory 1MiB",
              "pipewright: error: no split of resnet18 into 2 stages fits a 1.00 MiB cap: the best puts");
}

BOOST_AUTO_TEST_SUITE_END()
