#include "tools/top_view.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <sstream>

#include "core/error.h"
#include "core/units.h"

namespace pw::tools {
namespace {

std::optional<double> value_of(const std::vector<MetricSample>& samples, const std::string& name,
                               const std::map<std::string, std::string>& labels = {}) {
  for (const auto& s : samples)
    if (s.name == name && s.labels == labels) return s.value;
  return std::nullopt;
}

double parse_number(const std::string& text, std::size_t line) {
  if (text == "NaN") return std::nan("");
  if (text == "+Inf") return INFINITY;
  if (text == "-Inf") return -INFINITY;
  std::size_t used = 0;
  double v = 0.0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  PW_INPUT_CHECK(used == text.size() && !text.empty(),
                 "metrics line " << line << ": '" << text << "' is not a number (expected a float, NaN, +Inf or -Inf)");
  return v;
}

std::string bar(double share, int width) {
  const int filled = static_cast<int>(std::lround(std::clamp(share, 0.0, 1.0) * width));
  return "[" + std::string(static_cast<std::size_t>(filled), '#') + std::string(static_cast<std::size_t>(width - filled), '.') + "]";
}

std::string percent(double share) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%3.0f%%", 100.0 * share);
  return buf;
}

}  // namespace

std::vector<MetricSample> parse_exposition(const std::string& text) {
  std::vector<MetricSample> out;
  std::istringstream in(text);
  std::string line;
  for (std::size_t number = 1; std::getline(in, line); ++number) {
    if (line.empty() || line[0] == '#') continue;
    MetricSample s;
    std::size_t at = line.find_first_of("{ ");
    PW_INPUT_CHECK(at != std::string::npos && at > 0, "metrics line " << number << ": no value after the name");
    s.name = line.substr(0, at);
    if (line[at] == '{') {
      ++at;
      while (at < line.size() && line[at] != '}') {
        const auto eq = line.find('=', at);
        PW_INPUT_CHECK(eq != std::string::npos && eq + 1 < line.size() && line[eq + 1] == '"',
                       "metrics line " << number << ": a label without =\"value\"");
        const std::string key = line.substr(at, eq - at);
        std::string value;
        std::size_t i = eq + 2;
        for (; i < line.size() && line[i] != '"'; ++i) {
          if (line[i] == '\\' && i + 1 < line.size()) {
            ++i;
            value += line[i] == 'n' ? '\n' : line[i];
          } else {
            value += line[i];
          }
        }
        PW_INPUT_CHECK(i < line.size(), "metrics line " << number << ": a label value without its closing quote");
        s.labels[key] = value;
        at = i + 1;
        if (at < line.size() && line[at] == ',') ++at;
      }
      PW_INPUT_CHECK(at < line.size(), "metrics line " << number << ": labels without a closing }");
      ++at;
    }
    std::istringstream rest(line.substr(at));
    std::string value;
    rest >> value;
    s.value = parse_number(value, number);
    out.push_back(std::move(s));
  }
  return out;
}

std::string render_top(const TopFrame& f, int width) {
  std::ostringstream out;
  const auto& now = f.now;
  const auto step = value_of(now, "pipewright_step");
  const auto total = value_of(now, "pipewright_total_steps");
  char line[256];
  std::snprintf(line, sizeof line, "pipewright top  %s  step %.0f/%.0f", f.address.c_str(), step.value_or(0),
                total.value_or(0));
  out << line;
  if (f.before && f.seconds_between > 0) {
    const auto then = value_of(*f.before, "pipewright_steps_total");
    const auto steps_now = value_of(now, "pipewright_steps_total");
    if (then && steps_now) {
      std::snprintf(line, sizeof line, "  %.2f steps/s", (*steps_now - *then) / f.seconds_between);
      out << line;
    }
  }
  if (const auto loss = value_of(now, "pipewright_loss")) {
    std::snprintf(line, sizeof line, "  loss %.4f", *loss);
    out << line;
  }
  if (const auto sps = value_of(now, "pipewright_samples_per_second")) {
    std::snprintf(line, sizeof line, "  %.1f samples/s", *sps);
    out << line;
  }
  if (const auto lr = value_of(now, "pipewright_learning_rate")) {
    std::snprintf(line, sizeof line, "  lr %g", *lr);
    out << line;
  }
  out << '\n';

  const int bar_width = std::max(10, std::min(40, width - 50));
  out << "stage  " << std::string(static_cast<std::size_t>(bar_width + 2), ' ').replace(0, 4, "busy")
      << "  busy  comm  bubble  peak memory\n";
  for (int s = 0;; ++s) {
    const std::map<std::string, std::string> stage{{"stage", std::to_string(s)}};
    const auto busy = value_of(now, "pipewright_stage_busy_share", stage);
    if (!busy) break;
    const double comm = value_of(now, "pipewright_stage_communication_share", stage).value_or(0);
    const double bubble = value_of(now, "pipewright_stage_bubble_share", stage).value_or(0);
    const auto peak = value_of(now, "pipewright_stage_peak_memory_bytes", stage);
    std::snprintf(line, sizeof line, "%-5d  %s  %s  %s  %s    %s\n", s, bar(*busy, bar_width).c_str(),
                  percent(*busy).c_str(), percent(comm).c_str(), percent(bubble).c_str(),
                  peak ? format_bytes(static_cast<std::int64_t>(*peak)).c_str() : "-");
    out << line;
  }
  const MetricSample* slowest = nullptr;
  for (const auto& s : now)
    if (s.name == "pipewright_rank_own_seconds" && (!slowest || s.value > slowest->value)) slowest = &s;
  if (slowest) {
    std::snprintf(line, sizeof line, "longest own time: rank %s (stage %s, replica %s), %.4f s a step",
                  slowest->labels.at("rank").c_str(), slowest->labels.at("stage").c_str(),
                  slowest->labels.at("replica").c_str(), slowest->value);
    out << line;
    if (const auto cost = value_of(now, "pipewright_straggler_cost_seconds_total")) {
      std::snprintf(line, sizeof line, "; stragglers cost %.2f s", *cost);
      out << line;
    }
    out << '\n';
  }
  if (const auto accuracy = value_of(now, "pipewright_test_accuracy")) {
    std::snprintf(line, sizeof line, "test accuracy %.4f\n", *accuracy);
    out << line;
  }
  return out.str();
}

}  // namespace pw::tools
