#include "tools/pack_progress.h"

#include <unistd.h>

#include <cstdio>
#include <string>

#include "core/log.h"
#include "core/units.h"
#include "train/progress.h"

namespace pw::tools {

PackProgressBar::PackProgressBar() : in_place_(log::to_stderr() && isatty(fileno(stderr))) {}

void PackProgressBar::update(const models::data::shards::PackProgress& p) {
  const auto now = Clock::now();
  const bool last = p.samples_done == p.samples_total;
  const double fraction = p.samples_total > 0 ? static_cast<double>(p.samples_done) / static_cast<double>(p.samples_total) : 1.0;
  const int tenth = static_cast<int>(fraction * 10.0);
  if (in_place_ && !last && now - last_draw_ < std::chrono::milliseconds(100)) return;
  if (!in_place_ && tenth == last_tenth_) return;
  last_draw_ = now;
  last_tenth_ = tenth;
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double rate = elapsed > 0 ? static_cast<double>(p.bytes_done) / elapsed : 0.0;
  const double eta = fraction > 0 ? elapsed / fraction * (1.0 - fraction) : 0.0;
  constexpr int kWidth = 24;
  const int filled = static_cast<int>(fraction * kWidth);
  const std::string bar = std::string(static_cast<std::size_t>(filled), '#') + std::string(static_cast<std::size_t>(kWidth - filled), '-');
  char line[256];
  std::snprintf(line, sizeof line, "pack %-5s [%s] %3.0f%%  %lld/%lld samples  %s/s  %lld shards  ETA %s", p.split.c_str(), bar.c_str(),
                100.0 * fraction, static_cast<long long>(p.samples_done), static_cast<long long>(p.samples_total),
                format_bytes(static_cast<std::int64_t>(rate)).c_str(), static_cast<long long>(p.shards_done),
                train::format_duration(eta).c_str());
  if (!in_place_) return log::output(line);
  std::fprintf(stderr, "\r\033[K%s", line);
  std::fflush(stderr);
  dirty_ = true;
}

void PackProgressBar::finish() {
  if (dirty_) std::fprintf(stderr, "\n");
  dirty_ = false;
}

}  // namespace pw::tools
