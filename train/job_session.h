#pragma once
// What a job runs with in this process, built from its plan in dependency order and torn down in
// reverse by member order: the checkpoint folder, the parameter servers (threads of this process,
// or reached at given addresses), the world of ranks (every rank as a thread, or this process's
// rank of a launched job) and the engines of the ranks this process runs. run_job drives a
// session through fit(); the step-by-step API (pipewright/job.h) drives one a step at a time.
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "rpc/launch_env.h"
#include "train/engine.h"
#include "train/job_plan.h"
#include "train/parameter_servers.h"
#include "train/world.h"

namespace pw::train {

class JobSession {
 public:
  // `launch`: this process's place in a launched job (rpc::launch_env()); none: every rank runs
  // here as a thread, restarted `thread_world_restarts` times by a launcher (a world of one rank).
  // Builds every local rank's engine, each on its rank's thread.
  JobSession(JobPlan plan, std::optional<rpc::LaunchEnv> launch, rpc::RestartEnv thread_world_restarts = {});
  ~JobSession();
  JobSession(const JobSession&) = delete;
  JobSession& operator=(const JobSession&) = delete;

  const JobPlan& plan() const { return *plan_; }
  World& world() { return *world_; }
  int local_ranks() const { return static_cast<int>(engines_.size()); }
  Engine& engine(int local_index);
  // The engine of world rank `rank`; it must run in this process.
  Engine& engine_of_rank(int rank);

  // The local index of world rank `rank` (it must run in this process).
  std::size_t local_index(int rank) const;

  // Runs body(engine) for every local rank, each on its rank's thread; the first failure is
  // rethrown once every rank stopped. After a failure the next run starts clean where that is
  // possible (ranks as threads, no replicas); otherwise it refuses, saying why.
  void run(const std::function<void(Engine&)>& body);
  // run() that returns each local rank's result, by local index.
  template <typename T>
  std::vector<T> on_each_rank(const std::function<T(Engine&)>& body) {
    std::vector<T> results(engines_.size());
    run([&](Engine& engine) { results[local_index(engine.rank())] = body(engine); });
    return results;
  }
  // Forward only over `test` in batches of `batch` samples (at most `max_batches`; -1: all), split
  // over the replicas; rank 0's figures (every rank has them).
  models::EvalResult evaluate(const models::data::Dataset& test, std::int64_t batch, std::int64_t max_batches);
  // Every rank is done: each engine goes on its rank's thread (its collectives are released while
  // every rank still takes part), then a world of processes meets at a last barrier and leaves
  // the rendezvous. Called by the destructor when it was not, unless a run failed.
  void finish();

 private:
  std::shared_ptr<const JobPlan> plan_;
  std::unique_ptr<ParameterServers> servers_;
  std::unique_ptr<World> world_;
  std::vector<std::unique_ptr<Engine>> engines_;   // by local index; they use the world and the servers
  bool failed_ = false;
  bool finished_ = false;
};

}  // namespace pw::train
