// pw::train::Job (pipewright/job.h): a JobSession driven a step at a time by the program.
#include "pipewright/job.h"

#include <vector>

#include "core/error.h"
#include "rpc/launch_env.h"
#include "train/data_feed.h"
#include "train/job_session.h"

namespace pw::train {

namespace {

using models::data::DataParts;
using models::data::reads_inputs;
using models::data::reads_labels;

// A job driven step by step writes no checkpoints (fit does): refuse settings it would ignore.
const JobConfig& without_checkpoints(const JobConfig& c) {
  const auto& k = c.checkpoints;
  if (!k.dir.empty() || !k.resume.empty())
    throw ConfigError(k.dir.empty() ? "/checkpoints/resume" : "/checkpoints/dir",
                      "a job driven a step at a time (pw::train::Job) writes and resumes no checkpoints; train "
                      "with run_job for them, or leave the checkpoint settings out");
  return c;
}

// The parts of the global batch a rank reading `parts` needs, as tensors; InputError when one is
// missing or has another size.
models::data::Batch batch_for(const BatchView& global, const JobPlan& plan, DataParts parts) {
  models::data::Batch batch;
  if (parts == DataParts::None) return batch;
  const auto& c = plan.config;
  PW_INPUT_CHECK(global.samples == c.data.batch_size,
                 "a batch of " << global.samples << " samples; the job's batch size is " << c.data.batch_size);
  if (reads_inputs(parts)) {
    kernels::Shape shape{global.samples};
    shape.insert(shape.end(), plan.data.sample_shape.begin(), plan.data.sample_shape.end());
    const auto expected = static_cast<std::size_t>(kernels::shape_numel(shape));
    PW_INPUT_CHECK(global.inputs.size() == expected,
                   "the batch holds " << global.inputs.size() << " input values; " << global.samples << " samples of "
                                      << kernels::shape_str(plan.data.sample_shape) << " are " << expected
                                      << " (the pipeline's first stage reads the inputs)");
    batch.images = kernels::Tensor::from_vector(std::vector<float>(global.inputs.begin(), global.inputs.end()), shape);
  }
  if (reads_labels(parts)) {
    PW_INPUT_CHECK(static_cast<std::int64_t>(global.labels.size()) == global.samples,
                   "the batch holds " << global.labels.size() << " labels for " << global.samples
                                      << " samples (the pipeline's last stage reads the labels)");
    batch.labels = kernels::Tensor::from_vector(std::vector<std::int64_t>(global.labels.begin(), global.labels.end()),
                                                {global.samples});
  }
  return batch;
}

Feeds feeds_of(JobSession& session) {
  bool inputs = false, labels = false;
  for (int i = 0; i < session.local_ranks(); ++i) {
    const auto parts = session.engine(i).data_parts();
    inputs = inputs || reads_inputs(parts);
    labels = labels || reads_labels(parts);
  }
  return inputs && labels ? Feeds::InputsAndLabels : inputs ? Feeds::Inputs : labels ? Feeds::Labels : Feeds::Nothing;
}

bool runs_rank_zero(JobSession& session) {
  for (int i = 0; i < session.local_ranks(); ++i)
    if (session.engine(i).is_primary()) return true;
  return false;
}

}  // namespace

struct Job::Impl {
  explicit Impl(const JobConfig& config)
      : session(plan_job(without_checkpoints(config)), rpc::launch_env()),
        feeds(feeds_of(session)),
        primary(runs_rank_zero(session)) {}
  JobSession session;
  const Feeds feeds;
  const bool primary;
};

Job::Job(const JobConfig& config) : impl_(std::make_unique<Impl>(config)) {}
Job::~Job() = default;

int Job::world_size() const { return impl_->session.plan().shape().world_size(); }

bool Job::is_primary() const { return impl_->primary; }

Feeds Job::feeds() const { return impl_->feeds; }

StepOutcome Job::step(const BatchView& global) {
  auto& session = impl_->session;
  const auto& plan = session.plan();
  // Every local rank's part is checked before any rank starts: a refused batch leaves the job as
  // it was (another process checks its own parts; every process is given the same batch).
  std::vector<models::data::Batch> local(static_cast<std::size_t>(session.local_ranks()));
  for (int i = 0; i < session.local_ranks(); ++i) {
    const auto& engine = session.engine(i);
    local[static_cast<std::size_t>(i)] = local_part(batch_for(global, plan, engine.data_parts()),
                                                    plan.schedule.micro_batches, plan.replicas(), engine.replica(),
                                                    engine.data_parts());
  }
  return session.on_each_rank<StepOutcome>([&](Engine& engine) { return engine.step(local[session.local_index(engine.rank())]); })
      .front();
}

models::EvalResult Job::evaluate(const models::data::Dataset& test, std::int64_t batch, std::int64_t max_batches) {
  return impl_->session.evaluate(test, batch, max_batches);
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
