#pragma once
// Finds ranks slower than the other replicas of their stage. Every rank's own time per step
// (StepOutcome::rank_own_seconds: compute plus time between steps, not waits for other ranks) is
// collected over a window of steps; at the window's end a rank whose median exceeds the median of
// its stage's other replicas by more than the threshold is a straggler for that window, unless the
// excess is under 5% of the job's median step time (milliseconds of noise on a tiny model are not
// worth a report). The job waits for it at every all-reduce, so the excess, times the window's
// steps, is what it cost.
// Pure: the caller logs and records what it returns.
#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

namespace pw::train {

struct StragglerWindow {
  int rank = 0, stage = 0, replica = 0;
  std::int64_t first_step = 0, last_step = 0;   // the window, 1-based steps
  double own_seconds = 0.0;                      // its median per step
  double peer_seconds = 0.0;                     // the median of its stage's other replicas' medians
  double slower_by = 0.0;                        // own / peer - 1
  double cost_seconds = 0.0;                     // (own - peer) * steps in the window
};

class StragglerDetector {
 public:
  // threshold: 0.2 flags a rank 20% slower than its peers; window: steps per comparison (>= 1).
  StragglerDetector(int stages, int replicas, double threshold, int window);

  // One step's figures (indexed by job rank, replica-major). At the end of a window, the windows
  // in which a rank straggled; empty otherwise, and always with one replica per stage.
  // `step_seconds`: the step's wall time.
  std::vector<StragglerWindow> add(std::int64_t step, const std::vector<double>& rank_own_seconds,
                                   double step_seconds);

  double cost_seconds() const { return cost_seconds_; }
  // The summary's `stragglers`: per rank that straggled, its windows, how much slower at most
  // and in total, and the time it cost.
  nlohmann::json summary() const;

 private:
  int stages_, replicas_;
  double threshold_;
  int window_;
  std::int64_t first_step_ = 0;
  std::vector<std::vector<double>> samples_;   // per rank, the window's figures
  std::vector<double> step_seconds_;           // the window's step times
  std::vector<StragglerWindow> found_;
  double cost_seconds_ = 0.0;
};

}  // namespace pw::train
