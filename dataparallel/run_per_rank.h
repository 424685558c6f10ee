#pragma once
// Members of a collective as threads of one process, for the collectives' tests and benchmarks
// (an embedded job's ranks run on the world of threads, train/world.h).
#include <exception>
#include <functional>
#include <vector>

namespace pw::dp {

// Every member runs `body(rank)` on its own thread (collectives need all members at once);
// rethrows the first failure that is not another member's abort.
void run_per_rank(int ranks, const std::function<void(int)>& body);

// Of the members' failures (null: none), rethrows the root cause: the first that is not another
// member's abort (rpc::AbortedError), else the first abort. Returns when there is none.
void rethrow_root_cause(const std::vector<std::exception_ptr>& errors);

}  // namespace pw::dp
