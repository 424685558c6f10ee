#pragma once
// The training progress line: rewritten in place on a terminal, plain lines otherwise.
#include <cstdint>
#include <cstdio>
#include <string>

namespace pw::tools {

enum class ProgressStyle { InPlace, Lines };

class ProgressLine {
 public:
  // `out` null: prints nothing (the other ranks of a multi-process job).
  ProgressLine(std::FILE* out, std::int64_t total_steps, std::int64_t line_every);
  void update(std::int64_t step, double loss, double samples_per_second, double elapsed_seconds);
  void finish();
  bool in_place() const { return style_ == ProgressStyle::InPlace; }   // a terminal: no extra lines

 private:
  std::FILE* out_;
  ProgressStyle style_;
  std::int64_t total_;
  std::int64_t line_every_;
  bool dirty_ = false;
};

std::string format_duration(double seconds);   // "1m05s", "12s"

}  // namespace pw::tools
