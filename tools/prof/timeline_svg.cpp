#include "tools/prof/timeline_svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "core/error.h"
#include "pipeline/schedule.h"

namespace pw::tools {

namespace {

constexpr int kRowHeight = 26;
constexpr int kLeftMargin = 170;
constexpr int kTop = 40;

// A hue per micro-batch, far apart for neighbours (golden angle).
int hue_of(int micro_batch) { return static_cast<int>(std::fmod(std::max(0, micro_batch) * 137.508, 360.0)); }

std::string fill_of(const trace::Span& s) {
  char buf[64];
  switch (s.kind) {
    case trace::SpanKind::Forward: std::snprintf(buf, sizeof buf, "hsl(%d,70%%,72%%)", hue_of(s.micro_batch)); break;
    case trace::SpanKind::Recompute: std::snprintf(buf, sizeof buf, "hsl(%d,40%%,82%%)", hue_of(s.micro_batch)); break;
    case trace::SpanKind::Backward:
    case trace::SpanKind::BackwardInput: std::snprintf(buf, sizeof buf, "hsl(%d,70%%,42%%)", hue_of(s.micro_batch)); break;
    case trace::SpanKind::BackwardWeight: std::snprintf(buf, sizeof buf, "hsl(%d,55%%,28%%)", hue_of(s.micro_batch)); break;
    case trace::SpanKind::OptimizerStep: return "#444444";
    case trace::SpanKind::AllReduce: return "#8e44ad";
    case trace::SpanKind::AllGather: return "#16a085";
    case trace::SpanKind::Send:
    case trace::SpanKind::Transfer: return "#e67e22";
    case trace::SpanKind::RecvWait: return "url(#wait)";
    default: return "#bbbbbb";
  }
  return buf;
}

// "F3", or "F3.1" (micro-batch 3 of chunk 1) when stages hold several chunks.
std::string label_of(const trace::Span& s, int chunks) {
  const std::string mb = std::to_string(s.micro_batch) + (chunks > 1 ? "." + std::to_string(s.chunk) : "");
  switch (s.kind) {
    case trace::SpanKind::Forward: return "F" + mb;
    case trace::SpanKind::Backward: return "B" + mb;
    case trace::SpanKind::BackwardInput: return "Bi" + mb;
    case trace::SpanKind::BackwardWeight: return "W" + mb;
    case trace::SpanKind::Recompute: return "R" + mb;
    case trace::SpanKind::OptimizerStep: return "opt";
    case trace::SpanKind::AllReduce: return "AR";
    case trace::SpanKind::AllGather: return "AG";
    default: return "";
  }
}

}  // namespace

std::string timeline_svg(const TraceData& data, const SvgOptions& options) {
  PW_INPUT_CHECK(options.steps >= 1 && options.width >= 400, "the timeline needs at least one step and 400 pixels");
  std::set<std::int64_t> steps;
  for (const auto& s : data.spans)
    if (s.kind == trace::SpanKind::Step) steps.insert(s.step);
  PW_INPUT_CHECK(!steps.empty(), "the trace holds no complete step to draw");
  std::set<std::int64_t> shown;
  for (auto it = steps.rbegin(); it != steps.rend() && static_cast<int>(shown.size()) < options.steps; ++it)
    shown.insert(*it);
  std::int64_t t0 = INT64_MAX, t1 = INT64_MIN;
  // With chunks, each rank's work gets one row per chunk (under a V schedule, the chunk going down
  // the stages above the one coming back up), so that the V reads as two pipelines.
  const int chunks = std::max(1, data.meta.chunks);
  const auto row_key = [&](const trace::Span& s) {
    return std::tuple{rank_of(data.meta, s), static_cast<int>(s.lane), s.lane == 0 ? static_cast<int>(s.chunk) : 0};
  };
  std::map<std::tuple<int, int, int>, int> rows;   // (rank, lane, chunk) -> row
  for (const auto& s : data.spans) {
    if (s.stage < 0 || shown.count(s.step) == 0) continue;
    t0 = std::min(t0, s.start_ns);
    t1 = std::max(t1, s.end_ns);
    rows[row_key(s)] = 0;
  }
  int next_row = 0;
  for (auto& [key, row] : rows) row = next_row++;
  const double span_ns = std::max<double>(1.0, static_cast<double>(t1 - t0));
  const double plot = options.width - kLeftMargin - 20;
  const auto x_of = [&](std::int64_t t) { return kLeftMargin + plot * static_cast<double>(t - t0) / span_ns; };
  const int height = kTop + next_row * kRowHeight + 90;

  std::ostringstream svg;
  svg << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << options.width << "\" height=\"" << height
      << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
      << "<defs><pattern id=\"wait\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" "
         "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#eeeeee\"/>"
         "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#bbbbbb\" stroke-width=\"2\"/></pattern></defs>\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  const auto& m = data.meta;
  svg << "<text x=\"10\" y=\"20\" font-size=\"14\">" << m.model << ": " << m.schedule << ", " << m.stages
      << " stages" << (m.replicas > 1 ? " x " + std::to_string(m.replicas) + " replicas" : "") << ", "
      << m.micro_batches << " micro-batches; steps " << *shown.begin() << "-" << *shown.rbegin() << "</text>\n";
  pipeline::ScheduleSpec spec;
  spec.kind = pipeline::parse_schedule_kind(m.schedule);
  spec.stages = m.stages;
  spec.micro_batches = m.micro_batches;
  spec.chunks = chunks;
  for (const auto& [key, row] : rows) {
    const auto [rank, lane, chunk] = key;
    const int y = kTop + row * kRowHeight;
    const int stage = rank % m.stages;
    svg << "<text x=\"10\" y=\"" << y + 17 << "\">rank " << rank << " (stage " << stage << ")";
    if (lane == 1) svg << " all-reduce";
    else if (chunks > 1) svg << " piece " << pipeline::virtual_stage(spec, stage, chunk);
    svg << "</text>\n";
    svg << "<line x1=\"" << kLeftMargin << "\" y1=\"" << y + kRowHeight - 1 << "\" x2=\"" << options.width - 20
        << "\" y2=\"" << y + kRowHeight - 1 << "\" stroke=\"#eeeeee\"/>\n";
  }
  for (const auto& s : data.spans) {
    if (s.stage < 0 || shown.count(s.step) == 0 || s.kind == trace::SpanKind::Step) continue;
    const int row = rows.at(row_key(s));
    const double x = x_of(s.start_ns), w = std::max(0.5, x_of(s.end_ns) - x);
    const int y = kTop + row * kRowHeight + 3;
    svg << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << w << "\" height=\"" << kRowHeight - 7
        << "\" fill=\"" << fill_of(s) << "\"" << (s.kind == trace::SpanKind::Recompute ? " stroke=\"#333\" stroke-dasharray=\"2,2\"" : "")
        << "><title>" << trace::span_kind_name(s.kind) << " micro-batch " << s.micro_batch
        << (chunks > 1 ? ", chunk " + std::to_string(s.chunk) : "") << ", step " << s.step
        << ", " << (s.end_ns - s.start_ns) / 1000 << " us</title></rect>\n";
    const auto label = label_of(s, chunks);
    if (!label.empty() && w > 7.0 * static_cast<double>(label.size()))
      svg << "<text x=\"" << x + 2 << "\" y=\"" << y + 14 << "\" fill=\""
          << (s.kind == trace::SpanKind::Forward || s.kind == trace::SpanKind::Recompute ? "black" : "white") << "\">"
          << label << "</text>\n";
  }
  // Time axis: about eight ticks at a round step.
  const int axis_y = kTop + next_row * kRowHeight + 10;
  const double total_ms = span_ns / 1e6;
  const double raw = total_ms / 8.0;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double tick = raw / mag < 2 ? 2 * mag : raw / mag < 5 ? 5 * mag : 10 * mag;
  svg << "<line x1=\"" << kLeftMargin << "\" y1=\"" << axis_y << "\" x2=\"" << options.width - 20 << "\" y2=\""
      << axis_y << "\" stroke=\"black\"/>\n";
  for (double t = 0; t <= total_ms + 1e-9; t += tick) {
    const double x = kLeftMargin + plot * t / total_ms;
    svg << "<line x1=\"" << x << "\" y1=\"" << axis_y << "\" x2=\"" << x << "\" y2=\"" << axis_y + 5
        << "\" stroke=\"black\"/><text x=\"" << x - 8 << "\" y=\"" << axis_y + 18 << "\">" << t << "</text>\n";
  }
  svg << "<text x=\"" << options.width - 60 << "\" y=\"" << axis_y + 32 << "\">ms</text>\n";
  // Legend.
  const int ly = axis_y + 45;
  struct Item {
    const char* fill;
    const char* text;
  };
  const Item items[] = {{"hsl(0,70%,72%)", "forward (hue: micro-batch)"}, {"hsl(0,70%,42%)", "backward / input half"},
                        {"hsl(0,55%,28%)", "weight half"}, {"hsl(0,40%,82%)", "recompute"},
                        {"#e67e22", "send / copy"}, {"url(#wait)", "waiting for a neighbour"},
                        {"#8e44ad", "all-reduce"}, {"#444444", "optimizer"}};
  int lx = 10;
  for (const auto& item : items) {
    svg << "<rect x=\"" << lx << "\" y=\"" << ly << "\" width=\"14\" height=\"14\" fill=\"" << item.fill
        << "\" stroke=\"#999\"/><text x=\"" << lx + 18 << "\" y=\"" << ly + 11 << "\">" << item.text << "</text>\n";
    lx += 30 + 6 * static_cast<int>(std::string(item.text).size());
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace pw::tools
