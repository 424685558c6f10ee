// The profiler: busy shares from a schedule with known op times match the simulator's within 2
// percentage points; a real trace holds every stage and parses; the timeline is well-formed XML;
// foreign or truncated files get one-line errors; the trace carries memory by kind per rank.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <boost/property_tree/ptree.hpp>
#include <boost/property_tree/xml_parser.hpp>
#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "pipeline/simulator.h"
#include "tests/tools/cli_runner.h"
#include "tools/prof/analysis.h"
#include "tools/prof/split_replan.h"
#include "tools/prof/timeline_svg.h"
#include "train/job_config.h"
#include "train/trace_file.h"

using namespace pw;
using pw::test::run_pipewright;
using pw::test::ScratchDir;

namespace {

trace::SpanKind span_kind_of(pipeline::OpType op) {
  switch (op) {
    case pipeline::OpType::Forward: return trace::SpanKind::Forward;
    case pipeline::OpType::Backward: return trace::SpanKind::Backward;
    case pipeline::OpType::BackwardInput: return trace::SpanKind::BackwardInput;
    case pipeline::OpType::BackwardWeight: return trace::SpanKind::BackwardWeight;
    case pipeline::OpType::OptimizerStep: return trace::SpanKind::OptimizerStep;
    case pipeline::OpType::Recompute: return trace::SpanKind::Recompute;
    case pipeline::OpType::RecvActivation:
    case pipeline::OpType::RecvGradient: return trace::SpanKind::RecvWait;
    default: return trace::SpanKind::Send;
  }
}

// The simulator's timeline of `spec` with the given op times, as a trace of two steps.
// Two layers per piece; `programs` replaces the kind's own when given.
tools::TraceData simulated_trace(const pipeline::ScheduleSpec& spec, const pipeline::OpTimes& times,
                                 pipeline::SimulationResult& sim,
                                 const std::vector<std::vector<pipeline::Instruction>>& programs = {}) {
  sim = programs.empty() ? pipeline::simulate(spec, times) : pipeline::simulate(spec, programs, times);
  tools::TraceData data;
  data.meta.model = "synthetic";
  data.meta.schedule = pipeline::schedule_kind_name(spec.kind);
  data.meta.stages = spec.stages;
  data.meta.micro_batches = spec.micro_batches;
  data.meta.chunks = spec.chunks;
  const int pieces = spec.stages * spec.chunks;
  for (int l = 0; l < 2 * pieces; ++l) data.meta.layer_names.push_back("layer" + std::to_string(l));
  for (int v = 1; v < pieces; ++v) data.meta.split.push_back(2 * v);
  data.files = {"synthetic"};
  const auto ns = [](double seconds) { return static_cast<std::int64_t>(std::llround(seconds * 1e9)); };
  for (std::int64_t step = 0; step < 2; ++step) {
    const std::int64_t base = step * ns(sim.makespan);
    for (int s = 0; s < spec.stages; ++s) {
      trace::Span whole;
      whole.kind = trace::SpanKind::Step;
      whole.stage = static_cast<std::int16_t>(s);
      whole.step = step;
      whole.start_ns = base;
      whole.end_ns = base + ns(sim.makespan);
      data.spans.push_back(whole);
      for (const auto& op : sim.timeline[static_cast<std::size_t>(s)]) {
        if (op.end <= op.start) continue;
        trace::Span x;
        x.kind = span_kind_of(op.instruction.op);
        x.stage = static_cast<std::int16_t>(s);
        x.step = step;
        x.micro_batch = op.instruction.micro_batch;
        x.chunk = static_cast<std::int16_t>(op.instruction.chunk);
        x.start_ns = base + ns(op.start);
        x.end_ns = base + ns(op.end);
        data.spans.push_back(x);
      }
    }
  }
  return data;
}

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// The job a 3-stage, 4-micro-batch simulated trace stands for: the seed CNN split 1,2
// (conv1 | relu1 | pool1 flatten fc1 relu2 fc2), named in `data`'s meta (its job left out).
train::JobConfig seed_cnn_on_three_stages(tools::TraceData& data) {
  train::JobConfig job;
  job.model.name = "seed-cnn";
  job.data.dataset = "synthetic";
  job.data.batch_size = 32;
  job.pipeline.stages = 3;
  job.pipeline.micro_batches = 4;
  job.pipeline.split = {1, 2};
  data.meta.model = "seed-cnn";
  data.meta.split = job.pipeline.split;
  data.meta.layer_names = {"conv1", "relu1", "pool1", "flatten", "fc1", "relu2", "fc2"};
  return job;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(prof)

BOOST_AUTO_TEST_CASE(busy_shares_of_a_known_schedule_match_the_simulator) {
  ScratchDir dir("profsyn");
  for (auto kind : {pipeline::ScheduleKind::GPipe, pipeline::ScheduleKind::OneFOneB, pipeline::ScheduleKind::ZeroBubbleH1}) {
    pipeline::ScheduleSpec spec{kind, 4, 8, 1};
    auto times = pipeline::OpTimes::uniform(spec, 1e-3, 2e-3, kind == pipeline::ScheduleKind::ZeroBubbleH1 ? 1e-3 : 0.0);
    times.forward[2] = 2e-3;   // stage 2 is twice as slow
    times.backward_input[2] = 4e-3;
    pipeline::SimulationResult sim;
    const auto written = simulated_trace(spec, times, sim);
    // Through the file, as pipewright prof reads it.
    const auto path = dir.file("syn.json");
    tools::write_chrome_trace(path, written.meta, written.spans);
    const auto report = tools::analyze(tools::read_traces({path}));
    BOOST_TEST_CONTEXT(pipeline::schedule_kind_name(kind)) {
      BOOST_REQUIRE_EQUAL(report.ranks.size(), 4u);
      BOOST_TEST(report.steps == 2);
      for (int s = 0; s < 4; ++s) {
        const double measured = report.ranks[static_cast<std::size_t>(s)].compute / report.window;
        BOOST_TEST(std::abs(measured - sim.stage_busy_fraction[static_cast<std::size_t>(s)]) <= 0.02,
                   "stage " << s << ": " << measured << " vs " << sim.stage_busy_fraction[static_cast<std::size_t>(s)]);
      }
      BOOST_TEST(std::abs(report.measured_bubble - sim.bubble_fraction) <= 0.02);
      // The op times read back from the trace give the simulator's step again.
      BOOST_TEST(std::abs(report.simulated_step / sim.makespan - 1.0) <= 1e-6,
                 report.simulated_step << " vs " << sim.makespan);
      BOOST_TEST(tools::format_report(report).find("step: measured") != std::string::npos);
      BOOST_TEST(report.slowest_stage == 2);
      BOOST_TEST(report.suggestion.find("from stage 2 to stage") != std::string::npos, report.suggestion);
      BOOST_TEST(report.suggestion.find("--split") != std::string::npos, report.suggestion);
    }
  }
}

BOOST_AUTO_TEST_CASE(split_backwards_show_their_input_and_weight_halves_apart) {
  pipeline::ScheduleSpec spec{pipeline::ScheduleKind::ZeroBubbleH1, 2, 4, 1};
  pipeline::SimulationResult sim;
  const auto data = simulated_trace(spec, pipeline::OpTimes::uniform(spec, 1e-3, 2e-3, 3e-3), sim);
  const auto report = tools::analyze(data);
  for (const auto& u : report.ranks) {
    // Per step: 4 forwards of 1 ms, 4 input halves of 2 ms, 4 weight halves of 3 ms.
    BOOST_TEST(std::abs(u.compute_by_kind.at(trace::SpanKind::BackwardInput) / 2 - 8e-3) <= 1e-6);
    BOOST_TEST(std::abs(u.compute_by_kind.at(trace::SpanKind::BackwardWeight) / 2 - 12e-3) <= 1e-6);
    BOOST_TEST(u.compute_by_kind.count(trace::SpanKind::Backward) == 0u);
  }
  const auto text = tools::format_report(report);
  BOOST_TEST(text.find("input(Bi)  weight(W)") != std::string::npos, text);
  const auto json = tools::report_json(report);
  const double w = json["ranks"][0]["compute_by_op"]["backward-weight"].get<double>();
  BOOST_TEST(std::abs(w - 24e-3 / report.window) <= 1e-6);
}

// Interleaved: stage 1's chunk 0 (piece 1) is slow; its neighbours, pieces 0 and 2, are on stage 0.
BOOST_AUTO_TEST_CASE(the_split_suggestion_moves_a_layer_between_pieces) {
  pipeline::ScheduleSpec spec{pipeline::ScheduleKind::Interleaved, 2, 4, 2};
  auto times = pipeline::OpTimes::uniform(spec, 1e-3, 2e-3, 0.0);
  times.forward[1] = 4e-3;
  times.backward_input[1] = 8e-3;
  pipeline::SimulationResult sim;
  const auto report = tools::analyze(simulated_trace(spec, times, sim));
  BOOST_TEST(report.slowest_stage == 1);
  // Pieces of two layers: piece 1 is layers 2-3; moving layer 3 to piece 2 gives --split 2,3,6.
  BOOST_TEST(report.suggestion.find("move layer 3 'layer3' from stage 1 (piece 1) to stage 0 (piece 2): --split 2,3,6") !=
                 std::string::npos,
             report.suggestion);
}

// V placement (a hand-written program, GPipe's order): stage 1 holds pieces 1 and 2. With piece 1
// slow, its neighbour piece 2 is on the same stage, so the layer goes to piece 0 on stage 0.
BOOST_AUTO_TEST_CASE(under_v_placement_the_suggestion_never_stays_on_the_stage_and_the_timeline_shows_pieces) {
  const pipeline::ScheduleSpec spec{pipeline::ScheduleKind::ZeroBubbleV, 2, 2, 2};
  const std::vector<std::vector<pipeline::Instruction>> programs = {
      pipeline::from_text("F0.0 sA0.0 F1.0 sA1.0 rA0.1 F0.1 rA1.1 F1.1 B0.1 sG0.1 B1.1 sG1.1 rG0.0 B0.0 rG1.0 B1.0 RG S"),
      pipeline::from_text("rA0.0 F0.0 sA0.0 rA1.0 F1.0 sA1.0 rA0.1 F0.1 sA0.1 rA1.1 F1.1 sA1.1 rG0.1 B0.1 sG0.1 "
                          "rG1.1 B1.1 sG1.1 rG0.0 B0.0 sG0.0 rG1.0 B1.0 sG1.0 RG S")};
  auto times = pipeline::OpTimes::uniform(spec, 1e-3, 2e-3, 0.0);
  times.forward[1] = 4e-3;
  times.backward_input[1] = 8e-3;
  pipeline::SimulationResult sim;
  const auto data = simulated_trace(spec, times, sim, programs);
  const auto report = tools::analyze(data);
  BOOST_TEST(report.slowest_stage == 1);
  BOOST_TEST(report.suggestion.find("move layer 2 'layer2' from stage 1 (piece 1) to stage 0 (piece 0): --split 3,4,6") !=
                 std::string::npos,
             report.suggestion);
  const auto svg = tools::timeline_svg(data, {});
  for (const char* text : {"rank 0 (stage 0) piece 0", "rank 0 (stage 0) piece 3", "rank 1 (stage 1) piece 2", ">F1.0<"})
    BOOST_TEST(svg.find(text) != std::string::npos, text);
}

BOOST_AUTO_TEST_CASE(the_analytic_bubble_is_the_schedule_formula) {
  pipeline::ScheduleSpec spec{pipeline::ScheduleKind::OneFOneB, 4, 8, 1};
  pipeline::SimulationResult sim;
  auto data = simulated_trace(spec, pipeline::OpTimes::uniform(spec, 1e-3, 2e-3, 0.0), sim);
  const auto report = tools::analyze(data);
  BOOST_TEST(std::abs(report.analytic_bubble - 3.0 / 11.0) <= 1e-9);
  BOOST_TEST(std::abs(report.measured_bubble - 3.0 / 11.0) <= 0.02);
  BOOST_TEST(report.suggestion.empty(), report.suggestion);
}

// A trace that records its job (a zoo model, a synthetic data set) is re-planned: the third of three
// stages computes five times as long as the others, so the planner, spreading each piece's traced
// time over its layers by their profiled costs, predicts a faster split and says by how much.
// Without the job the single-layer move stands.
BOOST_AUTO_TEST_CASE(the_split_suggestion_comes_from_the_planner_when_the_job_can_be_replanned) {
  pipeline::ScheduleSpec spec{pipeline::ScheduleKind::OneFOneB, 3, 4, 1};
  auto times = pipeline::OpTimes::uniform(spec, 1e-3, 2e-3, 0.0);
  times.forward[2] = 5e-3;
  times.backward_input[2] = 10e-3;
  pipeline::SimulationResult sim;
  auto data = simulated_trace(spec, times, sim);
  train::JobConfig job = seed_cnn_on_three_stages(data);
  const auto fallback = tools::analyze(data);
  BOOST_TEST(fallback.suggested_split.empty());
  BOOST_TEST(fallback.suggestion.find("move layer 2 'pool1' from stage 2 to stage 1") != std::string::npos,
             fallback.suggestion);

  data.meta.job = train::to_json(job);
  ScratchDir dir("profplan");
  const auto path = dir.file("planned.json");
  tools::write_chrome_trace(path, data.meta, data.spans);
  // Equal times for every layer: the proportions the traced time is spread by do not depend on
  // how busy this machine is while the test runs.
  const auto equal_costs = [](const partition::ModelDescription& model, std::int64_t micro_batch) {
    auto layers = tools::profile_on_cpu(model, micro_batch);
    for (auto& l : layers) {
      l.forward_seconds = 1e-3;
      l.backward_seconds = 2e-3;
    }
    return layers;
  };
  const auto report = tools::analyze(tools::read_traces({path}), equal_costs);
  BOOST_REQUIRE_EQUAL(report.suggested_split.size(), 2u);
  BOOST_TEST(report.suggested_split != job.pipeline.split);
  BOOST_TEST(report.predicted_suggested_step < 0.99 * report.predicted_traced_step);
  BOOST_TEST(report.suggestion.find("(now 1,2): the planner predicts") != std::string::npos, report.suggestion);
  const auto j = tools::report_json(report);
  BOOST_TEST(j["suggested_split"] == nlohmann::json(report.suggested_split));
  BOOST_TEST(j["predicted_suggested_step_ms"].get<double>() < j["predicted_traced_step_ms"].get<double>());

  // Where it ran travels in the trace, and the re-plan keeps to the traced job's cap: under one that
  // no split fits, nothing is suggested.
  data.meta.device = "cpu:3";
  data.meta.device_memory = 1;
  tools::write_chrome_trace(path, data.meta, data.spans);
  const auto capped_data = tools::read_traces({path});
  BOOST_TEST(capped_data.meta.device == "cpu:3");
  BOOST_TEST(capped_data.meta.device_memory == 1);
  const auto capped = tools::analyze(capped_data, equal_costs);
  BOOST_TEST(capped.suggested_split.empty());
  BOOST_TEST(capped.suggestion.find("the planner predicts") == std::string::npos, capped.suggestion);
  data.meta.device_memory = 0;

  // A program's own model is not in the zoo here: the single-layer move again, without the planner's note.
  job.model.name = "someone-elses-model";
  data.meta.job = train::to_json(job);
  const auto unplanned = tools::analyze(data);
  BOOST_TEST(unplanned.suggested_split.empty());
  BOOST_TEST(unplanned.suggestion == fallback.suggestion);
  BOOST_TEST(unplanned.suggestion.find("the planner") == std::string::npos, unplanned.suggestion);
}

// The stage links' bandwidth the re-plan predicts with is the trace's: the bytes every boundary
// carries per micro-batch (an activation forward, a gradient back, as profiled) over the traced
// sends, whatever the device's stated default.
BOOST_AUTO_TEST_CASE(the_replan_measures_the_stage_links_from_the_traced_sends) {
  pipeline::ScheduleSpec spec{pipeline::ScheduleKind::OneFOneB, 3, 4, 1};
  const double send = 2e-4;
  pipeline::SimulationResult sim;
  auto data = simulated_trace(spec, pipeline::OpTimes::uniform(spec, 1e-3, 2e-3, 0.0), sim);
  // The simulator's sends take no time on the sender: add the traced ones, `send` each.
  for (std::int64_t step = 0; step < 2; ++step)
    for (int s = 0; s < 3; ++s)
      for (int mb = 0; mb < 4; ++mb)
        for (int k = 0; k < (s == 1 ? 2 : 1); ++k) {
          trace::Span x;
          x.kind = trace::SpanKind::Send;
          x.stage = static_cast<std::int16_t>(s);
          x.step = step;
          x.micro_batch = mb;
          x.start_ns = step * 1'000'000'000 + mb * 10'000'000;
          x.end_ns = x.start_ns + static_cast<std::int64_t>(send * 1e9);
          data.spans.push_back(x);
        }
  data.meta.job = train::to_json(seed_cnn_on_three_stages(data));
  std::vector<partition::LayerProfile> profiled;
  const auto costs = [&](const partition::ModelDescription& model, std::int64_t micro_batch) {
    profiled = tools::profile_on_cpu(model, micro_batch);
    return profiled;
  };
  const auto replan = tools::replan_split(data, {0, 1}, costs);
  BOOST_REQUIRE(replan.has_value());
  // Per micro-batch: stage 0 sends one activation, stage 1 an activation and a gradient, stage 2 a
  // gradient; each send takes `send`.
  const double bytes = 2.0 * static_cast<double>(profiled[0].output_bytes + profiled[1].output_bytes);
  BOOST_TEST(replan->stage_link_bytes_per_s == bytes / (4 * send), boost::test_tools::tolerance(1e-6));
}

BOOST_AUTO_TEST_CASE(a_real_trace_holds_every_stage_and_renders) {
  ScratchDir dir("profreal");
  const auto trace_path = dir.file("run.json");
  const auto r = run_pipewright("train --model seed-cnn --dataset synthetic --synthetic-size 256 --batch-size 32 "
                                "--steps 4 --stages 3 --micro-batches 4 --threads 1 --eval-batches 1 --trace " +
                                trace_path + " --trace-steps 1:3");
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  const auto doc = nlohmann::json::parse(std::ifstream(trace_path));
  std::set<int> pids, steps;
  bool named = false;
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") named = true;
    if (e["ph"] != "X") continue;
    pids.insert(e["pid"].get<int>());
    steps.insert(e["args"]["step"].get<int>());
    BOOST_TEST(e["args"].contains("micro_batch"));
  }
  BOOST_TEST(named);
  BOOST_TEST(pids == std::set<int>({0, 1, 2}));
  BOOST_TEST(steps == std::set<int>({1, 2}));   // --trace-steps 1:3
  const auto svg = dir.file("run.svg");
  auto prof = run_pipewright("prof " + trace_path + " --svg " + svg);
  BOOST_REQUIRE_MESSAGE(prof.status == 0, prof.output);
  BOOST_TEST(prof.output.find("bubble: measured") != std::string::npos, prof.output);
  BOOST_TEST(prof.output.find("slowest stage:") != std::string::npos, prof.output);
  boost::property_tree::ptree tree;
  BOOST_CHECK_NO_THROW(boost::property_tree::read_xml(svg, tree));
  BOOST_TEST(tree.count("svg") == 1u);
  prof = run_pipewright("prof --json " + trace_path);
  BOOST_REQUIRE_MESSAGE(prof.status == 0, prof.output);
  const auto j = nlohmann::json::parse(prof.output);
  BOOST_TEST(j["ranks"].size() == 3u);
  BOOST_TEST(j["steps"] == 2);
}

// Memory by kind as a counter track: every traced step, every rank (here 2 stages x 2 replicas
// with sharded Adam state in bf16) gives what its device held by kind at the step's end and at its
// peak so far, as Chrome counter events, and read_traces gives them back.
BOOST_AUTO_TEST_CASE(a_trace_holds_a_memory_counter_track_per_rank) {
  ScratchDir dir("profmemory");
  const auto trace_path = dir.file("memory.json");
  const auto r = run_pipewright("train --model seed-cnn --dataset synthetic --synthetic-size 256 --batch-size 32 "
                                "--steps 4 --stages 2 --replicas 2 --shard-optimizer --optimizer adam --precision bf16 "
                                "--threads 1 --eval-batches 1 --trace " + trace_path + " --trace-steps 1:3");
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  const auto doc = nlohmann::json::parse(std::ifstream(trace_path));
  const std::vector<std::string> kinds = {"parameters", "gradients", "master_weights", "optimizer_state",
                                          "activations", "communication", "workspace"};
  std::map<std::string, std::set<std::pair<int, int>>> samples;   // counter -> (rank, step)
  for (const auto& e : doc["traceEvents"]) {
    if (e["ph"] != "C") continue;
    const auto& a = e["args"];
    for (const auto& k : kinds) BOOST_TEST(a.contains(k), k);
    BOOST_TEST(a["parameters"].get<std::int64_t>() > 0);
    BOOST_TEST(a["optimizer_state"].get<std::int64_t>() > 0);
    BOOST_TEST(a["master_weights"].get<std::int64_t>() > 0);
    samples[e["name"].get<std::string>()].insert({e["pid"].get<int>(), a["step"].get<int>()});
  }
  const std::set<std::pair<int, int>> expected = {{0, 1}, {0, 2}, {1, 1}, {1, 2}, {2, 1}, {2, 2}, {3, 1}, {3, 2}};
  BOOST_TEST(samples["memory in use"] == expected);
  BOOST_TEST(samples["memory at peak"] == expected);
  const auto data = train::read_traces({trace_path});
  BOOST_REQUIRE_EQUAL(data.memory.size(), 8u);
  for (const auto& m : data.memory) {
    std::int64_t held = 0, at_peak = 0;
    for (std::size_t k = 0; k < m.in_use.size(); ++k) {
      held += m.in_use[k];
      at_peak += m.peak[k];
    }
    BOOST_TEST(held > 0);
    BOOST_TEST(at_peak >= held, "the peak so far holds at least what the step's end holds");
  }
}

BOOST_AUTO_TEST_CASE(ranks_of_a_multi_process_job_write_files_that_merge) {
  ScratchDir dir("profmp");
  const auto trace_path = dir.file("mp.json");
  const auto r = run_pipewright("launch --nproc-per-node 2 -- --model seed-cnn --dataset synthetic --synthetic-size 256 "
                                "--batch-size 32 --steps 3 --stages 2 --threads 1 --eval-batches 1 --trace " + trace_path);
  BOOST_REQUIRE_MESSAGE(r.status == 0, r.output);
  const auto prof = run_pipewright("prof --json " + dir.file("mp.rank0.json") + " " + dir.file("mp.rank1.json"));
  BOOST_REQUIRE_MESSAGE(prof.status == 0, prof.output);
  const auto j = nlohmann::json::parse(prof.output);
  BOOST_TEST(j["ranks"].size() == 2u);
  for (const auto& rank : j["ranks"]) BOOST_TEST(rank["busy"].get<double>() > 0.0);
}

BOOST_AUTO_TEST_CASE(foreign_or_truncated_files_get_one_line_errors) {
  ScratchDir dir("profbad");
  write_text(dir.file("cut.json"), "{\"traceEvents\": [{\"ph\": \"X\", \"ts\": 1");
  write_text(dir.file("chrome.json"), "{\"traceEvents\": []}");
  write_text(dir.file("other.json"), "{\"a\": 1}");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"cut.json", "not valid JSON"},
      {"chrome.json", "not one pipewright wrote"},
      {"other.json", "not a Chrome trace"},
      {"missing.json", "cannot open trace '"},
  };
  for (const auto& [file, message] : cases) {
    const auto r = run_pipewright("prof " + dir.file(file));
    BOOST_TEST(r.status == 2, file << ": " << r.output);
    BOOST_TEST(r.output.find(message) != std::string::npos, file << ": " << r.output);
  }
  // Where it ran, as recorded: a device of the wrong type is a malformed file; a device name this
  // machine cannot parse only leaves the planner's re-plan out (the single-layer move stands).
  pipeline::ScheduleSpec spec{pipeline::ScheduleKind::OneFOneB, 3, 4, 1};
  pipeline::SimulationResult sim;
  auto data = simulated_trace(spec, pipeline::OpTimes::uniform(spec, 1e-3, 2e-3, 0.0), sim);
  data.meta.job = train::to_json(seed_cnn_on_three_stages(data));
  data.meta.device = "gpu0";
  tools::write_chrome_trace(dir.file("device.json"), data.meta, data.spans);
  const auto odd = run_pipewright("prof " + dir.file("device.json"));
  BOOST_TEST(odd.status == 0, odd.output);
  BOOST_TEST(odd.output.find("the planner predicts") == std::string::npos, odd.output);
  std::ifstream in(dir.file("device.json"));
  auto doc = nlohmann::json::parse(in);
  doc["otherData"]["pipewright"]["device"] = 5;
  write_text(dir.file("typed.json"), doc.dump());
  const auto typed = run_pipewright("prof " + dir.file("typed.json"));
  BOOST_TEST(typed.status == 2, typed.output);
  BOOST_TEST(typed.output.find("malformed otherData.pipewright") != std::string::npos, typed.output);
  const auto r = run_pipewright("train --stages 2 --steps 1 --dataset synthetic --trace-steps 5:2 --trace " +
                                dir.file("x.json"));
  BOOST_TEST(r.status == 2);
  BOOST_TEST(r.output.find("--trace-steps: '5:2': expected trace steps A:B") != std::string::npos, r.output);
}

BOOST_AUTO_TEST_SUITE_END()
