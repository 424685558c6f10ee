#pragma once
// A job whose ranks are threads of this process, driven one step at a time by the caller: for
// programs that feed their own batches, tests and benchmarks. The ranks are the same Engines
// run_job builds, on the same world of threads; only the loop is the caller's.
//
//   pw::train::EmbeddedJob job(pw::train::plan_job(config));
//   for (auto& batch : my_batches) job.step(batch);   // the global batch, on the CPU
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models/data/dataset.h"
#include "train/engine.h"
#include "train/job_plan.h"
#include "train/job_session.h"

namespace pw::train {

class EmbeddedJob {
 public:
  // Builds a world of threads (in-process links, or Thrift on loopback for transport "thrift")
  // and every rank's engine (each on its rank's thread).
  explicit EmbeddedJob(JobPlan plan);
  ~EmbeddedJob();
  EmbeddedJob(const EmbeddedJob&) = delete;
  EmbeddedJob& operator=(const EmbeddedJob&) = delete;

  // One optimizer step on the global batch (each rank takes its part). After a failed step or
  // evaluation the next call starts clean, unless the job has replicas (their collectives were
  // cancelled): then it is an error saying so.
  StepOutcome step(const models::data::Batch& global);
  // Evaluates on `test` in batches of `batch` samples (at most `max_batches`, -1: all).
  models::EvalResult evaluate(const models::data::Dataset& test, std::int64_t batch, std::int64_t max_batches = -1);

  const JobPlan& plan() const { return session_.plan(); }
  int world_size() const { return session_.local_ranks(); }
  Engine& engine(int rank) { return session_.engine_of_rank(rank); }
  // Replica `replica`'s parameters by whole-model name (tied copies once per holder).
  std::vector<std::pair<std::string, models::Parameter*>> named_parameters(int replica = 0);

 private:
  JobSession session_;
};

}  // namespace pw::train
