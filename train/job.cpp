// pw::train::Job (pipewright/job.h): a JobSession driven a step at a time by the program.
#include "pipewright/job.h"

#include <vector>

#include "core/error.h"
#include "rpc/launch_env.h"
#include "train/data_feed.h"
#include "train/job_session.h"

namespace pw::train {

struct Job::Impl {
  explicit Impl(const JobConfig& config) : session(plan_job(config), rpc::launch_env()) {}
  JobSession session;
};

namespace {

using models::data::DataParts;

bool feeds_inputs(Feeds f) { return f == Feeds::Inputs || f == Feeds::InputsAndLabels; }
bool feeds_labels(Feeds f) { return f == Feeds::Labels || f == Feeds::InputsAndLabels; }

// The global batch as tensors, with only the parts this process feeds (checked against the plan).
models::data::Batch batch_of(const BatchView& global, const JobPlan& plan, Feeds feeds) {
  const auto& c = plan.config;
  PW_INPUT_CHECK(global.samples == c.data.batch_size,
                 "a batch of " << global.samples << " samples; the job's batch size is " << c.data.batch_size);
  models::data::Batch batch;
  if (feeds_inputs(feeds)) {
    kernels::Shape shape{global.samples};
    shape.insert(shape.end(), plan.data.sample_shape.begin(), plan.data.sample_shape.end());
    const auto expected = static_cast<std::size_t>(kernels::shape_numel(shape));
    PW_INPUT_CHECK(global.inputs.size() == expected,
                   "the batch holds " << global.inputs.size() << " input values; " << global.samples << " samples of "
                                      << kernels::shape_str(plan.data.sample_shape) << " are " << expected
                                      << " (this process runs the pipeline's first stage, which reads the inputs)");
    batch.images = kernels::Tensor::from_vector(std::vector<float>(global.inputs.begin(), global.inputs.end()), shape);
  }
  if (feeds_labels(feeds)) {
    PW_INPUT_CHECK(static_cast<std::int64_t>(global.labels.size()) == global.samples,
                   "the batch holds " << global.labels.size() << " labels for " << global.samples
                                      << " samples (this process runs the pipeline's last stage, which reads the labels)");
    batch.labels = kernels::Tensor::from_vector(std::vector<std::int64_t>(global.labels.begin(), global.labels.end()),
                                                {global.samples});
  }
  return batch;
}

}  // namespace

Job::Job(const JobConfig& config) : impl_(std::make_unique<Impl>(config)) {}
Job::~Job() = default;

int Job::world_size() const { return impl_->session.plan().shape().world_size(); }

bool Job::is_primary() const {
  auto& s = impl_->session;
  for (int i = 0; i < s.local_ranks(); ++i)
    if (s.engine(i).is_primary()) return true;
  return false;
}

Feeds Job::feeds() const {
  bool inputs = false, labels = false;
  for (int i = 0; i < impl_->session.local_ranks(); ++i) {
    const auto parts = impl_->session.engine(i).data_parts();
    inputs = inputs || parts == DataParts::Inputs || parts == DataParts::Both;
    labels = labels || parts == DataParts::Labels || parts == DataParts::Both;
  }
  return inputs && labels ? Feeds::InputsAndLabels : inputs ? Feeds::Inputs : labels ? Feeds::Labels : Feeds::Nothing;
}

StepOutcome Job::step(const BatchView& global) {
  auto& session = impl_->session;
  const auto& plan = session.plan();
  const auto batch = batch_of(global, plan, feeds());
  std::vector<StepOutcome> outcomes(static_cast<std::size_t>(session.local_ranks()));
  session.run([&](Engine& engine) {
    const auto local = local_part(batch, plan.schedule.micro_batches, plan.replicas(), engine.replica(),
                                  engine.data_parts());
    auto outcome = engine.step(local);
    for (int i = 0; i < session.local_ranks(); ++i)
      if (&session.engine(i) == &engine) outcomes[static_cast<std::size_t>(i)] = std::move(outcome);
  });
  return outcomes.front();
}

models::EvalResult Job::evaluate(const models::data::Dataset& test, std::int64_t batch, std::int64_t max_batches) {
  auto& session = impl_->session;
  const int replicas = session.plan().replicas();
  std::vector<models::EvalResult> results(static_cast<std::size_t>(session.local_ranks()));
  session.run([&](Engine& engine) {
    FeedShape shape{test.size(), test.sample_shape(), engine.data_parts(), replicas, engine.replica()};
    EvalFeed feed(&test, shape, batch, max_batches);
    auto result = engine.evaluate(feed);
    for (int i = 0; i < session.local_ranks(); ++i)
      if (&session.engine(i) == &engine) results[static_cast<std::size_t>(i)] = result;
  });
  return results.front();
}

void Job::save_weights(const std::string& path) {
  impl_->session.run([&](Engine& engine) { engine.save(path); });
}

double Job::lr() const { return impl_->session.engine(0).lr(); }

void Job::set_lr(double lr) {
  impl_->session.run([&](Engine& engine) { engine.set_lr(lr); });
}

void Job::finish() { impl_->session.finish(); }

}  // namespace pw::train
