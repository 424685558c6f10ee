#pragma once
// The latest value of each metric, rendered in Prometheus' text exposition format (version 0.0.4):
// "# HELP", "# TYPE", then one "name{label="value",...} number" line per series. Thread-safe: the
// training loop sets values while the metrics server renders them.
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace pw::monitor {

enum class MetricType { Gauge, Counter };
using Labels = std::vector<std::pair<std::string, std::string>>;

class MetricsRegistry {
 public:
  // Declares a family once, before its first set(); names and label names are [a-zA-Z_:][a-zA-Z0-9_:]*.
  void describe(const std::string& name, MetricType type, const std::string& help);
  void set(const std::string& name, const Labels& labels, double value);
  void set(const std::string& name, double value) { set(name, {}, value); }
  std::string exposition() const;

 private:
  struct Family {
    MetricType type = MetricType::Gauge;
    std::string help;
    std::map<Labels, double> series;
  };
  mutable std::mutex mutex_;
  std::map<std::string, Family> families_;
};

// A sample value as the format writes it: NaN, +Inf, -Inf, or the shortest exact decimal.
std::string exposition_value(double value);
// A label value with \, " and newlines escaped.
std::string escape_label_value(const std::string& value);

}  // namespace pw::monitor
