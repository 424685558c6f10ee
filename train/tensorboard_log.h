#pragma once
// The job's scalars in TensorBoard (FitOptions::tensorboard_dir), written by rank 0 from figures
// every rank already shares after a step (StepOutcome: per-stage figures came from their ranks
// over the job's links), so no rank writes files on another host.
//
// Tags: train/loss, train/learning_rate, train/samples_per_second, train/gradient_norm,
// train/loss_scale (fp16), train/skipped_steps (so far), train/data_wait_share (rank 0's wait for
// its loader over the step), stage<S>/busy_share (computing), stage<S>/communication_share
// (sending, the all-reduce's exposed wait, copying what arrived), stage<S>/bubble_share (waiting for
// a neighbour: the rest, so the three add up to 1), stage<S>/peak_memory_bytes; test/accuracy and
// test/loss after the evaluation; with replicas, stragglers/cost_seconds (so far) and, at the end
// of a window in which rank R straggled, stragglers/rank<R>_slower_by. Shares are of the step's time on rank 0, each stage's figure the
// mean over its replicas.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pipewright/fit.h"
#include "train/monitor/tensorboard_writer.h"
#include "train/step_figures.h"

namespace pw::train {


class TensorBoardLog {
 public:
  // InputError naming the folder when it cannot be used.
  explicit TensorBoardLog(const std::string& folder);
  // A write that fails (a full disk) is logged once and ends the log; training goes on.
  void step(const StepFigures& f);
  void evaluation(std::int64_t step, double accuracy, double loss);
  std::string path() const { return writer_ ? writer_->path().string() : std::string(); }

 private:
  void write(std::int64_t step, const monitor::Scalars& scalars);
  std::unique_ptr<monitor::TensorBoardWriter> writer_;
};

monitor::Scalars step_scalars(const StepFigures& f);

}  // namespace pw::train
