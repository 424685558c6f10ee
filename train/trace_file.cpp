#include "train/trace_file.h"

#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "core/input_file.h"
#include "core/durable_file.h"
#include "core/error.h"
#include "core/json_text.h"
#include "kernels/allocator.h"

namespace pw::train {

namespace {

using nlohmann::json;

std::string event_name(const trace::Span& s) {
  const std::string mb = std::to_string(s.micro_batch);
  switch (s.kind) {
    case trace::SpanKind::Step: return "step " + std::to_string(s.step);
    case trace::SpanKind::Forward: return "F" + mb;
    case trace::SpanKind::Backward: return "B" + mb;
    case trace::SpanKind::BackwardInput: return "Bi" + mb;
    case trace::SpanKind::BackwardWeight: return "W" + mb;
    case trace::SpanKind::Recompute: return "R" + mb;
    case trace::SpanKind::OptimizerStep: return "optimizer";
    case trace::SpanKind::Send: return "send " + mb;
    case trace::SpanKind::RecvWait: return "wait " + mb;
    case trace::SpanKind::Transfer: return "copy " + mb;
    case trace::SpanKind::AllReduce: return s.lane == 1 ? "all-reduce bucket " + mb : "reduce-grads";
    case trace::SpanKind::DataLoad: return "data";
    case trace::SpanKind::PsPull: return "ps pull";
    case trace::SpanKind::PsPush: return "ps push";
    case trace::SpanKind::AllGather: return "all-gather bucket " + mb;
  }
  return "?";
}

trace::SpanKind kind_named(const std::string& name, const std::string& file) {
  for (int k = 0; k < trace::kSpanKinds; ++k)
    if (name == trace::span_kind_name(static_cast<trace::SpanKind>(k))) return static_cast<trace::SpanKind>(k);
  throw InputError(file + ": unknown span kind '" + name + "'");
}

// The counter tracks' names: what a rank held at the step's end, and at its peak so far.
constexpr const char* kMemoryInUse = "memory in use";
constexpr const char* kMemoryAtPeak = "memory at peak";

json bytes_by_kind(const std::array<std::int64_t, trace::kMemoryKindSlots>& bytes) {
  json out = json::object();
  for (std::size_t k = 0; k < bytes.size(); ++k) out[kernels::memory_kind_name(static_cast<kernels::MemoryKind>(k))] = bytes[k];
  return out;
}

std::array<std::int64_t, trace::kMemoryKindSlots> bytes_from(const json& args) {
  std::array<std::int64_t, trace::kMemoryKindSlots> out{};
  for (std::size_t k = 0; k < out.size(); ++k)
    out[k] = args.at(kernels::memory_kind_name(static_cast<kernels::MemoryKind>(k))).get<std::int64_t>();
  return out;
}

const char* lane_name(int lane) { return lane == 1 ? "all-reduce" : lane == 2 ? "data" : "compute"; }

json meta_json(const TraceMeta& m) {
  return {{"version", 1},          {"model", m.model},         {"schedule", m.schedule},
          {"stages", m.stages},    {"replicas", m.replicas},   {"micro_batches", m.micro_batches},
          {"chunks", m.chunks},    {"split", m.split},         {"layer_names", m.layer_names},
          {"process_rank", m.process_rank}, {"clock_offset_ns", m.clock_offset_ns},
          {"dropped_spans", m.dropped_spans}, {"job", m.job}, {"device", m.device},
          {"device_memory", m.device_memory}, {"threads", m.threads}, {"prefetch_batches", m.prefetch_batches}};
}

TraceMeta meta_from(const json& j) {
  TraceMeta m;
  m.model = j.at("model").get<std::string>();
  m.schedule = j.at("schedule").get<std::string>();
  m.stages = j.at("stages").get<int>();
  m.replicas = j.at("replicas").get<int>();
  m.micro_batches = j.at("micro_batches").get<int>();
  m.chunks = j.at("chunks").get<int>();
  m.split = j.at("split").get<std::vector<int>>();
  m.layer_names = j.at("layer_names").get<std::vector<std::string>>();
  m.process_rank = j.at("process_rank").get<int>();
  m.clock_offset_ns = j.at("clock_offset_ns").get<std::int64_t>();
  m.dropped_spans = j.value("dropped_spans", std::int64_t{0});
  if (const auto it = j.find("job"); it != j.end()) m.job = *it;
  m.device = j.value("device", std::string());
  m.device_memory = j.value("device_memory", std::int64_t{0});
  m.threads = j.value("threads", 0);
  m.prefetch_batches = j.value("prefetch_batches", 2);
  PW_INPUT_CHECK(m.stages >= 1 && m.replicas >= 1 && m.micro_batches >= 1 && m.chunks >= 1,
                 "stages, replicas, micro-batches and chunks must be positive");
  return m;
}

}  // namespace

int rank_of(const TraceMeta& meta, const trace::Span& span) {
  return span.stage >= 0 ? span.replica * meta.stages + span.stage : meta.process_rank;
}

std::string rank_trace_path(const std::string& path, int rank) {
  const std::filesystem::path p(path);
  return (p.parent_path() / (p.stem().string() + ".rank" + std::to_string(rank) + p.extension().string())).string();
}

void write_chrome_trace(const std::string& path, const TraceMeta& meta, const std::vector<trace::Span>& spans,
                        const std::vector<trace::MemorySample>& memory) {
  json events = json::array();
  std::map<int, std::map<int, bool>> tracks;   // rank -> lanes used
  for (const auto& m : memory) {
    const int rank = m.replica * meta.stages + m.stage;
    tracks[rank];
    const double ts = static_cast<double>(m.time_ns + meta.clock_offset_ns) / 1e3;
    for (const auto& [name, bytes] : {std::pair{kMemoryInUse, &m.in_use}, std::pair{kMemoryAtPeak, &m.peak}}) {
      json args = bytes_by_kind(*bytes);
      args["step"] = m.step;   // a counter's args are its series: step is one too, read back with them
      events.push_back({{"name", name}, {"cat", "memory"}, {"ph", "C"}, {"ts", ts}, {"pid", rank}, {"args", args}});
    }
  }
  for (const auto& s : spans) {
    const int rank = rank_of(meta, s);
    const int lane = s.stage >= 0 ? s.lane : 2;
    tracks[rank][lane] = true;
    events.push_back({{"name", event_name(s)},
                      {"cat", trace::span_kind_name(s.kind)},
                      {"ph", "X"},
                      {"ts", static_cast<double>(s.start_ns + meta.clock_offset_ns) / 1e3},
                      {"dur", static_cast<double>(s.end_ns - s.start_ns) / 1e3},
                      {"pid", rank},
                      {"tid", lane},
                      {"args",
                       {{"kind", trace::span_kind_name(s.kind)},
                        {"step", s.step},
                        {"micro_batch", s.micro_batch},
                        {"chunk", s.chunk},
                        {"stage", s.stage},
                        {"replica", s.replica},
                        {"lane", s.lane}}}});
  }
  for (const auto& [rank, lanes] : tracks) {
    const int stage = rank % meta.stages, replica = rank / meta.stages;
    std::string name = "rank " + std::to_string(rank) + " (stage " + std::to_string(stage);
    if (meta.replicas > 1) name += ", replica " + std::to_string(replica);
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", rank}, {"args", {{"name", name + ")"}}}});
    events.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", rank}, {"args", {{"sort_index", rank}}}});
    for (const auto& [lane, used] : lanes)
      events.push_back({{"ph", "M"},
                        {"name", "thread_name"},
                        {"pid", rank},
                        {"tid", lane},
                        {"args", {{"name", "stage " + std::to_string(stage) + " " + lane_name(lane)}}}});
  }
  json doc = {{"traceEvents", events}, {"displayTimeUnit", "ms"}, {"otherData", {{"pipewright", meta_json(meta)}}}};
  try {
    write_file_durably(path, doc.dump() + "\n");
  } catch (const InputError& e) {
    throw InputError(std::string("trace: ") + e.what());
  }
}

TraceData read_traces(const std::vector<std::string>& paths) {
  PW_INPUT_CHECK(!paths.empty(), "give at least one trace file");
  TraceData data;
  for (const auto& path : paths) {
    const std::string text = read_whole(path, "trace", std::int64_t{4} << 30);   // a plain file, not blocking
    json doc;
    try {
      check_json_depth(text, path);   // before parsing (core/json_text.h)
      doc = json::parse(text);
    } catch (const json::parse_error& e) {
      throw InputError(path + ": not valid JSON (" + e.what() + "); was the file cut short while being written?");
    }
    PW_INPUT_CHECK(doc.is_object() && doc.contains("traceEvents") && doc["traceEvents"].is_array(),
                   path << ": not a Chrome trace (expected an object with a traceEvents array)");
    const json* mine = doc.contains("otherData") && doc["otherData"].is_object() && doc["otherData"].contains("pipewright")
                           ? &doc["otherData"]["pipewright"]
                           : nullptr;
    PW_INPUT_CHECK(mine != nullptr, path << ": a Chrome trace, but not one pipewright wrote (no otherData.pipewright); "
                                            "give the trace files a pipewright job writes");
    TraceMeta meta;
    try {
      meta = meta_from(*mine);
    } catch (const json::exception& e) {
      throw InputError(path + ": malformed otherData.pipewright: " + e.what());
    } catch (const InputError& e) {
      throw InputError(path + ": malformed otherData.pipewright: " + e.what());
    }
    if (data.files.empty()) {
      data.meta = meta;
    } else {
      PW_INPUT_CHECK(meta.stages == data.meta.stages && meta.replicas == data.meta.replicas &&
                         meta.micro_batches == data.meta.micro_batches && meta.schedule == data.meta.schedule &&
                         meta.model == data.meta.model,
                     path << ": from another run than " << data.files.front() << " (model, schedule or shape differ)");
      data.meta.dropped_spans += meta.dropped_spans;
    }
    data.files.push_back(path);
    try {
      for (const auto& e : doc["traceEvents"]) {
        if (e.value("ph", "") == "C" && e.value("name", "") == kMemoryInUse) {
          // Its "memory at peak" partner has the same rank and time.
          const auto& a = e.at("args");
          const int rank = e.at("pid").get<int>();
          trace::MemorySample m;
          m.stage = static_cast<std::int16_t>(rank % meta.stages);
          m.replica = static_cast<std::int16_t>(rank / meta.stages);
          m.step = a.at("step").get<std::int64_t>();
          m.time_ns = static_cast<std::int64_t>(e.at("ts").get<double>() * 1e3);
          m.in_use = bytes_from(a);
          data.memory.push_back(m);
        } else if (e.value("ph", "") == "C" && e.value("name", "") == kMemoryAtPeak) {
          const auto& a = e.at("args");
          const int rank = e.at("pid").get<int>();
          const auto ts = static_cast<std::int64_t>(e.at("ts").get<double>() * 1e3);
          const auto step = a.at("step").get<std::int64_t>();
          for (auto it = data.memory.rbegin(); it != data.memory.rend(); ++it)
            if (it->replica * meta.stages + it->stage == rank && it->time_ns == ts && it->step == step) {
              it->peak = bytes_from(a);
              break;
            }
        }
        if (e.value("ph", "") != "X") continue;
        const auto& a = e.at("args");
        trace::Span s;
        s.kind = kind_named(a.at("kind").get<std::string>(), path);
        s.step = a.at("step").get<std::int64_t>();
        s.micro_batch = a.at("micro_batch").get<int>();
        s.chunk = static_cast<std::int16_t>(a.at("chunk").get<int>());
        s.stage = static_cast<std::int16_t>(a.at("stage").get<int>());
        s.replica = static_cast<std::int16_t>(a.at("replica").get<int>());
        s.lane = static_cast<std::int8_t>(a.at("lane").get<int>());
        // The file's times already carry its clock offset.
        s.start_ns = static_cast<std::int64_t>(e.at("ts").get<double>() * 1e3);
        s.end_ns = s.start_ns + static_cast<std::int64_t>(e.at("dur").get<double>() * 1e3);
        PW_INPUT_CHECK(s.end_ns >= s.start_ns, path << ": a span with negative duration");
        data.spans.push_back(s);
      }
    } catch (const json::exception& e) {
      throw InputError(path + ": malformed trace event: " + e.what());
    }
  }
  return data;
}

}  // namespace pw::train
