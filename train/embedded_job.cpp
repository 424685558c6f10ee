#include "train/embedded_job.h"

#include "core/error.h"
#include "rpc/launch_env.h"
#include "train/data_feed.h"

namespace pw::train {

EmbeddedJob::EmbeddedJob(JobPlan plan) : plan_(std::make_unique<JobPlan>(std::move(plan))) {
  // Under a launcher every process would build the whole job on its own: several jobs, not one.
  if (const auto launch = rpc::launch_env())
    throw InputError("EmbeddedJob runs every rank of a job as a thread of this process, but this process is rank " +
                     std::to_string(launch->rank) + " of " + std::to_string(launch->world_size) + " started by " +
                     launch->launcher + "; run it without a launcher, or train with run_job (pipewright/fit.h), "
                     "which runs this process's rank of the job");
  check_devices(plan_->config, plan_->shape().world_size());
  world_ = make_thread_world(plan_->shape(),
                             plan_->config.transport == TransportKind::Thrift ? ThreadLinks::Thrift : ThreadLinks::InProcess);
  engines_.resize(static_cast<std::size_t>(plan_->shape().world_size()));
  world_->run([this](RankLinks& links) {
    engines_[static_cast<std::size_t>(links.rank())] = std::make_unique<Engine>(*plan_, links);
  });
}

EmbeddedJob::~EmbeddedJob() {
  // The engines first (on this thread; their rank threads are idle), then the world that joins
  // the rank threads.
  engines_.clear();
  world_.reset();
}

void EmbeddedJob::run(const std::function<void(RankLinks&)>& body) {
  if (failed_) {
    PW_CHECK(plan_->replicas() == 1 && world_->recover(),
             "the job cannot go on after a failed step: its replicas' collectives were cancelled; build a new one");
    failed_ = false;
  }
  try {
    world_->run(body);
  } catch (...) {
    failed_ = true;
    throw;
  }
}

StepOutcome EmbeddedJob::step(const models::data::Batch& global) {
  std::vector<StepOutcome> outcomes(engines_.size());
  run([&](RankLinks& links) {
    auto& engine = *engines_[static_cast<std::size_t>(links.rank())];
    const auto local = local_part(global, plan_->schedule.micro_batches, plan_->replicas(), links.replica(),
                                  engine.data_parts());
    outcomes[static_cast<std::size_t>(links.rank())] = engine.step(local);
  });
  return outcomes.front();
}

models::EvalResult EmbeddedJob::evaluate(const models::data::Dataset& test, std::int64_t batch,
                                         std::int64_t max_batches) {
  std::vector<models::EvalResult> results(engines_.size());
  run([&](RankLinks& links) {
    auto& engine = *engines_[static_cast<std::size_t>(links.rank())];
    FeedShape shape{test.size(), test.sample_shape(), engine.data_parts(), plan_->replicas(), links.replica()};
    EvalFeed feed(&test, shape, batch, max_batches);
    results[static_cast<std::size_t>(links.rank())] = engine.evaluate(feed);
  });
  return results.front();
}

std::vector<std::pair<std::string, models::Parameter*>> EmbeddedJob::named_parameters(int replica) {
  std::vector<std::pair<std::string, models::Parameter*>> out;
  const int P = plan_->schedule.stages;
  for (int s = 0; s < P; ++s)
    for (auto* layer : engine(replica * P + s).layers()) {
      auto part = layer->named_parameters();
      out.insert(out.end(), part.begin(), part.end());
    }
  return out;
}

}  // namespace pw::train
