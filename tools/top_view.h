#pragma once
// `pipewright top`'s view: a metrics page in Prometheus' text format, parsed, and drawn as a
// terminal table (steps/s, loss, throughput, a utilisation bar per stage, the slowest rank).
#include <map>
#include <string>
#include <vector>

namespace pw::tools {

struct MetricSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0.0;
};

// Every sample line of an exposition; comments and blank lines are skipped. InputError naming
// the line for one that is not `name[{label="value",...}] number [timestamp]`.
std::vector<MetricSample> parse_exposition(const std::string& text);

struct TopFrame {
  std::string address;                 // HOST:PORT
  std::vector<MetricSample> now;
  const std::vector<MetricSample>* before = nullptr;   // the previous scrape, for rates
  double seconds_between = 0.0;
};

// The table, lines of at most `width` columns.
std::string render_top(const TopFrame& frame, int width = 100);

}  // namespace pw::tools
