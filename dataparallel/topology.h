#pragma once
// Ranks on a grid of pipeline stages x data-parallel replicas (as DeepSpeed's
// PipeModelDataParallelTopology): rank = replica * stages + stage, so each replica's pipeline is
// a run of consecutive ranks. Each stage's replicas form one group that averages its gradients.
#include <string>
#include <vector>

namespace pw::dp {

class Topology {
 public:
  Topology(int stages, int replicas);   // InputError unless both >= 1

  int stages() const { return stages_; }
  int replicas() const { return replicas_; }
  int world_size() const { return stages_ * replicas_; }
  int rank_of(int stage, int replica) const;
  int stage_of(int rank) const;
  int replica_of(int rank) const;
  std::vector<int> stage_group(int stage) const;   // the ranks holding `stage`, by replica
  // The grid as a small table (stages across, replicas down), printed at start.
  std::string grid() const;

 private:
  int stages_;
  int replicas_;
};

}  // namespace pw::dp
