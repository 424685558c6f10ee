#pragma once
// Ranks that share one host's CPU cores (CPU devices; ranks as threads of one process or as
// processes of one host): each rank's ops run `threads_per_rank` threads, and while n ops run at
// once on the host each progresses at min(1, cores / (threads_per_rank x n)) of its speed alone
// (processor sharing), divided by its stage's slowdown beside the others where one was measured
// (CoreSharing::co_run_slowdown). The simulation of a schedule under that sharing, and of ops that
// start together (the replicas' gradient collectives and optimizer steps after the pipeline).
#include <vector>

#include "pipeline/simulator.h"

namespace pw::pipeline {

struct CoreSharing {
  int cores = 0;              // the host's cores; 0: every rank has cores of its own
  int threads_per_rank = 1;
  int replicas = 1;           // identical pipelines side by side: each op simulated stands for this many
  // Ops sharing the host's caches and memory bandwidth run slower than alone: by stage, how much
  // longer (0.2: 20%) its ops take when `co_run_threads` threads of the job compute at once
  // (partition::co_run_slowdowns); with fewer busy, in proportion to the busy threads beyond the
  // op's own. Empty: none.
  std::vector<double> co_run_slowdown;
  int co_run_threads = 0;
  // Whether the ranks' threads can outnumber the cores: threads_per_rank x ranks > cores.
  bool oversubscribed(int ranks_per_replica) const;
  // Whether an op's speed can depend on the others running: oversubscribed, or slowed down
  // beside them.
  bool shared(int ranks_per_replica) const;
  // The share of a core of each of `running` ops of one pipeline running at once (times
  // `replicas` on the host).
  double rate(int running) const;
  // The speed of an op of `stage` among `running` at once: its share of a core, less the slowdown.
  double rate(int running, int stage) const;
};

// `simulate`'s result when the stages' compute ops progress at CoreSharing::rate of those running
// at the same time: an op's time is its OpTimes entry stretched by the sharing, and the busy time
// of a stage is its ops' stretched times. Sends and receives take no core (a transfer's time is the
// link's). When no op's speed depends on the others (CoreSharing::shared: the ranks cannot
// oversubscribe the cores and no slowdown beside them was measured) it is `simulate`'s result
// exactly. Validates the programs and reports deadlocks as `simulate` does.
SimulationResult simulate(const ScheduleSpec& spec, const std::vector<std::vector<Instruction>>& programs,
                          const OpTimes& times, const CoreSharing& sharing);
SimulationResult simulate(const ScheduleSpec& spec, const OpTimes& times, const CoreSharing& sharing);

// Ops that start together, one per stage of every replica (`seconds[s]` each, alone): when the
// last of them ends under the sharing. The largest of them when no op's speed depends on the
// others (CoreSharing::shared).
double concurrent_seconds(const std::vector<double>& seconds, const CoreSharing& sharing);

}  // namespace pw::pipeline
