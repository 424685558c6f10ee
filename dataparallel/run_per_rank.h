#pragma once
// Members of a collective as threads of one process, for the collectives' tests and benchmarks
// (an embedded job's ranks run on the world of threads, train/world.h).
#include <functional>

namespace pw::dp {

// Every member runs `body(rank)` on its own thread (collectives need all members at once);
// rethrows the first failure that is not another member's abort.
void run_per_rank(int ranks, const std::function<void(int)>& body);

}  // namespace pw::dp
