#include "train/step_figures.h"

#include <algorithm>

namespace pw::train {

StageShares stage_shares(const StepFigures& f, std::size_t stage) {
  const StepOutcome& o = *f.outcome;
  const auto share = [&](double seconds) {
    return f.step_seconds > 0 ? std::clamp(seconds / f.step_seconds, 0.0, 1.0) : 0.0;
  };
  StageShares s;
  s.busy = stage < o.stage_busy_seconds.size() ? share(o.stage_busy_seconds[stage]) : 0.0;
  s.communication = stage < o.stage_communication_seconds.size()
                        ? std::min(share(o.stage_communication_seconds[stage]), 1.0 - s.busy)
                        : 0.0;
  s.bubble = 1.0 - s.busy - s.communication;
  return s;
}

double data_wait_share(const StepFigures& f) {
  const double wall = f.step_seconds + f.data_wait_seconds;
  return wall > 0 ? f.data_wait_seconds / wall : 0.0;
}

}  // namespace pw::train
