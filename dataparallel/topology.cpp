#include "dataparallel/topology.h"

#include <sstream>

#include "core/error.h"

namespace pw::dp {

Topology::Topology(int stages, int replicas) : stages_(stages), replicas_(replicas) {
  PW_INPUT_CHECK(stages >= 1 && replicas >= 1,
                 "a topology needs at least one stage and one replica, got " << stages << " x " << replicas);
}

int Topology::rank_of(int stage, int replica) const {
  PW_CHECK(stage >= 0 && stage < stages_ && replica >= 0 && replica < replicas_,
           "stage " << stage << ", replica " << replica << " outside " << stages_ << " x " << replicas_);
  return replica * stages_ + stage;
}

int Topology::stage_of(int rank) const {
  PW_CHECK(rank >= 0 && rank < world_size(), "rank " << rank << " outside a world of " << world_size());
  return rank % stages_;
}

int Topology::replica_of(int rank) const {
  PW_CHECK(rank >= 0 && rank < world_size(), "rank " << rank << " outside a world of " << world_size());
  return rank / stages_;
}

std::vector<int> Topology::stage_group(int stage) const {
  std::vector<int> ranks;
  for (int r = 0; r < replicas_; ++r) ranks.push_back(rank_of(stage, r));
  return ranks;
}

std::string Topology::grid() const {
  std::ostringstream out;
  out << "ranks (" << stages_ << " stages x " << replicas_ << " replicas):\n           ";
  for (int s = 0; s < stages_; ++s) out << " stage " << s;
  out << "\n";
  for (int r = 0; r < replicas_; ++r) {
    out << "replica " << r << "  ";
    for (int s = 0; s < stages_; ++s) {
      std::string cell = std::to_string(rank_of(s, r));
      out << std::string(8 - cell.size(), ' ') << cell;
    }
    out << "\n";
  }
  return out.str();
}

}  // namespace pw::dp
