#pragma once
// A job a program drives one step at a time, in any job shape: the program reads its own data and
// hands each global batch to step(), as torch.distributed.pipelining's schedule.step(x) /
// step(target=y) or DeepSpeed's train_batch() do.
//
//   pw::train::Job job(config);                  // config.program_model: the program's model
//   for (std::int64_t s = 0; s < steps; ++s) {
//     const auto batch = my_batch(s);            // the global batch, the same on every process
//     const auto out = job.step({batch.samples, batch.inputs, batch.labels});
//     if (job.is_primary()) std::printf("step %lld loss %.4f\n", (long long)s, out.loss);
//   }
//
// Without a launcher every rank of the job runs as a thread of this process. Started by
// `pipewright launch`, torchrun-style variables, srun or mpirun, this process is one rank: each
// process then calls step() with the same global batch, and takes from it only what its rank
// feeds (feeds(): the pipeline's first stage the inputs, its last the labels; a middle stage
// nothing, so it may pass an empty batch). Every process must call every method in the same order.
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "pipewright/dataset.h"
#include "pipewright/fit.h"
#include "pipewright/job_config.h"
#include "pipewright/metrics.h"

namespace pw::train {

// What the ranks of this process read from a batch.
enum class Feeds { Nothing, Inputs, Labels, InputsAndLabels };

// One global batch on the host: `samples` samples, each the model's sample shape of F32 in
// row-major order (`inputs`: samples x C x H x W values), and their class labels.
struct BatchView {
  std::int64_t samples = 0;
  std::span<const float> inputs;
  std::span<const std::int64_t> labels;
};

class Job {
 public:
  // Plans the job (ConfigError naming a field, InputError for what the data says) and builds this
  // process's ranks; with a launcher's environment, meets the other processes first.
  explicit Job(const JobConfig& config);
  ~Job();
  Job(const Job&) = delete;
  Job& operator=(const Job&) = delete;

  int world_size() const;
  // Whether rank 0 runs in this process (it reports for the job).
  bool is_primary() const;
  Feeds feeds() const;

  // One optimizer step on the global batch (its size is the config's batch size): the same
  // figures on every process. InputError when a part this process feeds is missing or has
  // another size. After a failed step, a job whose ranks are threads and that has no replicas may
  // go on; any other refuses its next call.
  StepOutcome step(const BatchView& global);
  // Forward only over `test` in batches of `batch` samples (at most `max_batches`; -1: all), split
  // over the replicas; every process passes the same data set.
  models::EvalResult evaluate(const models::data::Dataset& test, std::int64_t batch, std::int64_t max_batches = -1);
  // The whole model's weights as safetensors, written by rank 0's process (pipewright/weights.h).
  void save_weights(const std::string& path);
  double lr() const;
  void set_lr(double lr);
  // Every process is done: they meet and leave the job's rendezvous (the destructor does it
  // when this was not called and nothing failed).
  void finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pw::train
