#include "train/monitor/metrics_registry.h"

#include <charconv>
#include <cmath>
#include <sstream>

#include "core/error.h"

namespace pw::monitor {
namespace {

bool valid_name(const std::string& name) {
  if (name.empty()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!letter && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

std::string escape_help(const std::string& help) {
  std::string out;
  for (const char c : help) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

}  // namespace

std::string exposition_value(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  return std::string(buf, ec == std::errc() ? end : buf);
}

std::string escape_label_value(const std::string& value) {
  std::string out;
  for (const char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

void MetricsRegistry::describe(const std::string& name, MetricType type, const std::string& help) {
  PW_CHECK(valid_name(name), "metric name '" << name << "'");
  std::lock_guard lock(mutex_);
  auto& f = families_[name];
  f.type = type;
  f.help = help;
}

void MetricsRegistry::set(const std::string& name, const Labels& labels, double value) {
  std::lock_guard lock(mutex_);
  const auto it = families_.find(name);
  PW_CHECK(it != families_.end(), "metric " << name << " set before it was described");
  for (const auto& [label, _] : labels) PW_CHECK(valid_name(label) && label.rfind("__", 0) != 0, "label name '" << label << "'");
  it->second.series[labels] = value;
}

std::string MetricsRegistry::exposition() const {
  std::lock_guard lock(mutex_);
  std::ostringstream out;
  for (const auto& [name, f] : families_) {
    if (f.series.empty()) continue;
    out << "# HELP " << name << ' ' << escape_help(f.help) << '\n';
    out << "# TYPE " << name << ' ' << (f.type == MetricType::Counter ? "counter" : "gauge") << '\n';
    for (const auto& [labels, value] : f.series) {
      out << name;
      if (!labels.empty()) {
        out << '{';
        for (std::size_t i = 0; i < labels.size(); ++i)
          out << (i ? "," : "") << labels[i].first << "=\"" << escape_label_value(labels[i].second) << '"';
        out << '}';
      }
      out << ' ' << exposition_value(value) << '\n';
    }
  }
  return out.str();
}

}  // namespace pw::monitor
