#pragma once
// The training progress line: rewritten in place on a terminal, plain lines otherwise.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace pw::train {

enum class ProgressStyle { InPlace, Lines };
enum class ProgressOutput { None, Log };   // None: the other ranks of a multi-process job

class ProgressLine {
 public:
  // Lines go through the log (pipewright/log.h); on a terminal with the default sink the line is
  // rewritten in place on stderr instead.
  ProgressLine(ProgressOutput output, std::int64_t total_steps, std::int64_t line_every);
  void update(std::int64_t step, double loss, double samples_per_second, double elapsed_seconds);
  void finish();
  bool in_place() const { return style_ == ProgressStyle::InPlace; }   // a terminal: no extra lines

 private:
  ProgressOutput output_;
  ProgressStyle style_;
  std::int64_t total_;
  std::int64_t line_every_;
  bool dirty_ = false;
};

std::string format_duration(double seconds);   // "1m05s", "12s"

// Every N steps: how busy each stage was since the last line, and the resulting bubble.
class UtilisationLine {
 public:
  explicit UtilisationLine(std::int64_t every) : every_(every) {}
  void add(std::int64_t step, double seconds, const std::vector<double>& busy);

 private:
  std::int64_t every_;
  std::vector<double> busy_;
  double seconds_ = 0.0;
  std::int64_t first_ = -1;
};

}  // namespace pw::train
