#pragma once
// The squared norm of what the servers apply for one step when a stage has several replicas: each
// replica pushes its own gradients of the rows its batch touched (already scaled by 1/replicas),
// and the servers add them up by key. So the norm is that of the sum, not the sum of the replicas'
// norms: rows that two replicas both touched count once, with their gradients added.
#include <vector>

#include "dataparallel/ps/remote_rows.h"

namespace pw::dp {

// `all[r][l]`: replica r's pending rows of the stage's l-th server-backed layer (every replica
// lists the same layers). Returns the sum over layers and keys of |sum over r of the row|^2, added
// in replica order in double precision. InternalError when the layer counts or row widths disagree.
double sum_of_squares_over_replicas(const std::vector<std::vector<PendingRows>>& all);

}  // namespace pw::dp
