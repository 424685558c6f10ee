#include "dataparallel/run_per_rank.h"

#include <exception>
#include <thread>
#include <vector>

#include "rpc/transport.h"

namespace pw::dp {

void run_per_rank(int ranks, const std::function<void(int)>& body) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  rethrow_root_cause(errors);
}

void rethrow_root_cause(const std::vector<std::exception_ptr>& errors) {
  std::exception_ptr echo;
  for (const auto& e : errors) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const rpc::AbortedError&) {
      if (!echo) echo = e;
    } catch (...) {
      throw;
    }
  }
  if (echo) std::rethrow_exception(echo);
}

}  // namespace pw::dp
