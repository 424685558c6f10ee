#include "train/tensorboard_log.h"

#include <algorithm>

#include "core/error.h"
#include "core/log.h"

namespace pw::train {

monitor::Scalars step_scalars(const StepFigures& f) {
  const StepOutcome& o = *f.outcome;
  monitor::Scalars s;
  if (!o.skipped) s.emplace_back("train/loss", o.loss);
  s.emplace_back("train/learning_rate", f.learning_rate);
  s.emplace_back("train/samples_per_second", f.samples_per_second);
  if (!o.skipped) s.emplace_back("train/gradient_norm", o.gradient_norm);
  if (f.fp16) s.emplace_back("train/loss_scale", o.loss_scale);
  s.emplace_back("train/skipped_steps", static_cast<double>(f.skipped_steps));
  s.emplace_back("train/data_wait_share", data_wait_share(f));
  for (std::size_t i = 0; i < o.stage_busy_seconds.size(); ++i) {
    const std::string stage = "stage" + std::to_string(i) + "/";
    const auto shares = stage_shares(f, i);
    s.emplace_back(stage + "busy_share", shares.busy);
    s.emplace_back(stage + "communication_share", shares.communication);
    s.emplace_back(stage + "bubble_share", shares.bubble);
    if (i < o.stage_peak_memory.size())
      s.emplace_back(stage + "peak_memory_bytes", static_cast<double>(o.stage_peak_memory[i]));
  }
  if (f.straggler_cost_seconds) s.emplace_back("stragglers/cost_seconds", *f.straggler_cost_seconds);
  for (const auto& w : f.stragglers)
    s.emplace_back("stragglers/rank" + std::to_string(w.rank) + "_slower_by", w.slower_by);
  return s;
}

TensorBoardLog::TensorBoardLog(const std::string& folder)
    : writer_(std::make_unique<monitor::TensorBoardWriter>(folder)) {}

void TensorBoardLog::step(const StepFigures& f) { write(f.step, step_scalars(f)); }

void TensorBoardLog::evaluation(std::int64_t step, double accuracy, double loss) {
  write(step, {{"test/accuracy", accuracy}, {"test/loss", loss}});
}

void TensorBoardLog::write(std::int64_t step, const monitor::Scalars& scalars) {
  if (!writer_) return;
  try {
    writer_->write(step, scalars);
  } catch (const std::exception& e) {
    PW_LOG(Warn, "TensorBoard: " << e.what() << "; no more scalars are written, training goes on");
    writer_.reset();
  }
}

}  // namespace pw::train
