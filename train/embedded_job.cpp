#include "train/embedded_job.h"

#include "core/error.h"
#include "rpc/launch_env.h"
#include "train/data_feed.h"

namespace pw::train {

namespace {

// Under a launcher every process would build the whole job on its own: several jobs, not one.
JobPlan refuse_under_launcher(JobPlan plan) {
  if (const auto launch = rpc::launch_env())
    throw InputError("EmbeddedJob runs every rank of a job as a thread of this process, but this process is rank " +
                     std::to_string(launch->rank) + " of " + std::to_string(launch->world_size) + " started by " +
                     launch->launcher + "; run it without a launcher, or train with run_job (pipewright/fit.h) "
                     "or pw::train::Job (pipewright/job.h), which run this process's rank of the job");
  return plan;
}

}  // namespace

EmbeddedJob::EmbeddedJob(JobPlan plan) : session_(refuse_under_launcher(std::move(plan)), std::nullopt) {}

EmbeddedJob::~EmbeddedJob() = default;

StepOutcome EmbeddedJob::step(const models::data::Batch& global) {
  const auto& plan = this->plan();
  return session_
      .on_each_rank<StepOutcome>([&](Engine& engine) {
        return engine.step(local_part(global, plan.schedule.micro_batches, plan.replicas(), engine.replica(),
                                      engine.data_parts()));
      })
      .front();
}

models::EvalResult EmbeddedJob::evaluate(const models::data::Dataset& test, std::int64_t batch,
                                         std::int64_t max_batches) {
  return session_.evaluate(test, batch, max_batches);
}

std::vector<std::pair<std::string, models::Parameter*>> EmbeddedJob::named_parameters(int replica) {
  std::vector<std::pair<std::string, models::Parameter*>> out;
  const int P = plan().schedule.stages;
  for (int s = 0; s < P; ++s) {
    engine(replica * P + s).await_weights();
    for (auto* layer : engine(replica * P + s).layers()) {
      auto part = layer->named_parameters();
      out.insert(out.end(), part.begin(), part.end());
    }
  }
  return out;
}

}  // namespace pw::train
