#include "train/progress.h"

#include <unistd.h>

#include <cmath>

#include "core/log.h"

namespace pw::train {

ProgressLine::ProgressLine(ProgressOutput output, std::int64_t total_steps, std::int64_t line_every)
    : output_(output),
      style_(output == ProgressOutput::Log && log::to_stderr() && isatty(fileno(stderr)) ? ProgressStyle::InPlace
                                                                                          : ProgressStyle::Lines),
      total_(total_steps),
      line_every_(line_every < 1 ? 1 : line_every) {}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto s = static_cast<long>(std::lround(seconds));
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, (s / 60) % 60);
  else if (s >= 60) std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%lds", s);
  return buf;
}

void ProgressLine::update(std::int64_t step, double loss, double samples_per_second, double elapsed) {
  if (output_ == ProgressOutput::None) return;
  const bool last = step == total_;
  if (style_ == ProgressStyle::Lines && step % line_every_ != 0 && !last && step != 1) return;
  const double eta = step > 0 ? elapsed / static_cast<double>(step) * static_cast<double>(total_ - step) : 0.0;
  const int width = static_cast<int>(std::to_string(total_).size());
  char line[160];
  std::snprintf(line, sizeof line, "step %*lld/%lld  loss %.4f  %.1f samples/s  ETA %s", width,
                static_cast<long long>(step), static_cast<long long>(total_), loss, samples_per_second,
                format_duration(eta).c_str());
  if (style_ == ProgressStyle::Lines) return log::output(line);
  std::fprintf(stderr, "\r\033[K%s", line);
  std::fflush(stderr);
  dirty_ = true;
}

void ProgressLine::finish() {
  if (dirty_) std::fprintf(stderr, "\n");
  dirty_ = false;
}

void UtilisationLine::add(std::int64_t step, double seconds, const std::vector<double>& busy) {
  if (busy.size() < 2) return;
  busy_.resize(busy.size(), 0.0);
  for (std::size_t i = 0; i < busy.size(); ++i) busy_[i] += busy[i];
  seconds_ += seconds;
  if (first_ < 0) first_ = step;
  if (step % every_ != 0) return;
  std::string line = "utilisation steps " + std::to_string(first_) + "-" + std::to_string(step) + ": stage busy";
  double mean = 0.0;
  for (double b : busy_) {
    const double f = seconds_ > 0 ? b / seconds_ : 0.0;
    mean += f / static_cast<double>(busy_.size());
    char cell[16];
    std::snprintf(cell, sizeof cell, " %.0f%%", 100.0 * f);
    line += cell;
  }
  char tail[64];
  std::snprintf(tail, sizeof tail, "; bubble %.0f%%", 100.0 * (1.0 - mean));
  log::output(line + tail);
  busy_.assign(busy_.size(), 0.0);
  seconds_ = 0.0;
  first_ = -1;
}

}  // namespace pw::train
