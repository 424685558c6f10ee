#include "train/job_metrics.h"

#include <algorithm>

namespace pw::train {

using monitor::MetricType;

JobMetrics::JobMetrics(const std::string& host, int port, int stages, std::int64_t total_steps, std::int64_t first_step,
                       std::string token, const monitor::MetricsTls& tls)
    : stages_(stages) {
  auto& r = registry_;
  r.describe("pipewright_step", MetricType::Gauge, "The last step made (1-based).");
  r.describe("pipewright_steps_total", MetricType::Counter, "Steps the job has made (a resumed job counts from its checkpoint).");
  r.describe("pipewright_total_steps", MetricType::Gauge, "Steps the job makes in all.");
  r.describe("pipewright_loss", MetricType::Gauge, "The last applied step's mean loss over the global batch.");
  r.describe("pipewright_learning_rate", MetricType::Gauge, "The learning rate in force.");
  r.describe("pipewright_samples_per_second", MetricType::Gauge, "Training samples per second over the run so far.");
  r.describe("pipewright_gradient_norm", MetricType::Gauge, "The last applied step's gradient norm, before clipping.");
  r.describe("pipewright_loss_scale", MetricType::Gauge, "fp16: the loss scale of the last step.");
  r.describe("pipewright_skipped_steps_total", MetricType::Counter, "Steps skipped (non-finite values, fp16 overflow).");
  r.describe("pipewright_step_seconds", MetricType::Gauge, "The last step's time on rank 0.");
  r.describe("pipewright_data_wait_share", MetricType::Gauge, "Share of the last step rank 0 waited for its loader.");
  r.describe("pipewright_stage_busy_share", MetricType::Gauge, "Share of the last step the stage computed.");
  r.describe("pipewright_stage_communication_share", MetricType::Gauge,
             "Share of the last step the stage sent, copied or waited for its all-reduce.");
  r.describe("pipewright_stage_bubble_share", MetricType::Gauge, "Share of the last step the stage waited for a neighbour.");
  r.describe("pipewright_stage_peak_memory_bytes", MetricType::Gauge, "The largest device peak over the stage's replicas.");
  r.describe("pipewright_rank_own_seconds", MetricType::Gauge,
             "The rank's compute and time between steps in the last step (not waits for other ranks).");
  r.describe("pipewright_straggler_cost_seconds_total", MetricType::Counter, "Step time stragglers cost the job so far.");
  r.describe("pipewright_test_accuracy", MetricType::Gauge, "Accuracy of the evaluation at the end.");
  r.describe("pipewright_test_loss", MetricType::Gauge, "Loss of the evaluation at the end.");
  r.set("pipewright_total_steps", static_cast<double>(total_steps));
  r.set("pipewright_step", static_cast<double>(first_step));   // before the first step of this run
  r.set("pipewright_steps_total", static_cast<double>(first_step));
  r.set("pipewright_skipped_steps_total", 0.0);
  server_ = std::make_unique<monitor::MetricsServer>(host, port, registry_, std::move(token), tls);
}

void JobMetrics::step(const StepFigures& f) {
  const StepOutcome& o = *f.outcome;
  auto& r = registry_;
  r.set("pipewright_step", static_cast<double>(f.step));
  r.set("pipewright_steps_total", static_cast<double>(f.step));
  if (!o.skipped) {
    r.set("pipewright_loss", o.loss);
    r.set("pipewright_gradient_norm", o.gradient_norm);
  }
  r.set("pipewright_learning_rate", f.learning_rate);
  r.set("pipewright_samples_per_second", f.samples_per_second);
  if (f.fp16) r.set("pipewright_loss_scale", o.loss_scale);
  r.set("pipewright_skipped_steps_total", static_cast<double>(f.skipped_steps));
  r.set("pipewright_step_seconds", f.step_seconds);
  r.set("pipewright_data_wait_share", data_wait_share(f));
  for (std::size_t s = 0; s < o.stage_busy_seconds.size(); ++s) {
    const monitor::Labels stage{{"stage", std::to_string(s)}};
    const auto shares = stage_shares(f, s);
    r.set("pipewright_stage_busy_share", stage, shares.busy);
    r.set("pipewright_stage_communication_share", stage, shares.communication);
    r.set("pipewright_stage_bubble_share", stage, shares.bubble);
    if (s < o.stage_peak_memory.size())
      r.set("pipewright_stage_peak_memory_bytes", stage, static_cast<double>(o.stage_peak_memory[s]));
  }
  for (std::size_t rank = 0; rank < o.rank_own_seconds.size(); ++rank)
    r.set("pipewright_rank_own_seconds",
          {{"rank", std::to_string(rank)},
           {"stage", std::to_string(static_cast<int>(rank) % stages_)},
           {"replica", std::to_string(static_cast<int>(rank) / stages_)}},
          o.rank_own_seconds[rank]);
  if (f.straggler_cost_seconds) r.set("pipewright_straggler_cost_seconds_total", *f.straggler_cost_seconds);
}

void JobMetrics::evaluation(double accuracy, double loss) {
  registry_.set("pipewright_test_accuracy", accuracy);
  registry_.set("pipewright_test_loss", loss);
}

}  // namespace pw::train
