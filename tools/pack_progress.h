#pragma once
// The progress bar of `pipewright data pack` on stderr: rewritten in place on a terminal, a plain
// line every 10% otherwise (logs, CI).
#include <chrono>

#include "models/data/shards/pack.h"

namespace pw::tools {

class PackProgressBar {
 public:
  PackProgressBar();
  void update(const models::data::shards::PackProgress& p);
  void finish();

 private:
  using Clock = std::chrono::steady_clock;
  bool in_place_;
  Clock::time_point start_ = Clock::now();
  Clock::time_point last_draw_{};
  int last_tenth_ = -1;
  bool dirty_ = false;
};

}  // namespace pw::tools
