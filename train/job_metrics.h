#pragma once
// The job's live figures on an HTTP endpoint of rank 0 (FitOptions::metrics_port), in Prometheus'
// text format: what TensorBoard gets after each step, with `stage`, `replica` and `rank` labels.
//
//   pipewright_step, pipewright_steps_total, pipewright_total_steps, pipewright_loss,
//   pipewright_learning_rate, pipewright_samples_per_second, pipewright_gradient_norm,
//   pipewright_loss_scale (fp16), pipewright_skipped_steps_total, pipewright_step_seconds,
//   pipewright_data_wait_share, pipewright_stage_{busy,communication,bubble}_share{stage},
//   pipewright_stage_peak_memory_bytes{stage}, pipewright_rank_own_seconds{rank,stage,replica},
//   pipewright_straggler_cost_seconds_total, pipewright_test_accuracy, pipewright_test_loss
#include <memory>
#include <string>

#include "train/monitor/metrics_registry.h"
#include "train/monitor/metrics_server.h"
#include "train/step_figures.h"

namespace pw::train {

class JobMetrics {
 public:
  // Serves on host:port (0: any free port); InputError naming the address when it cannot. Off
  // loopback, requests must carry the job's token as a bearer token (`token`; empty: none needed).
  // `first_step`: the step the run starts from (a resumed job's checkpoint), where the counters start.
  // `tls`: serve HTTPS with this certificate and key (a job with --tls-*).
  JobMetrics(const std::string& host, int port, int stages, std::int64_t total_steps, std::int64_t first_step = 0,
             std::string token = {}, const monitor::MetricsTls& tls = {});
  void step(const StepFigures& f);
  void evaluation(double accuracy, double loss);
  std::string url() const { return server_->url(); }
  const monitor::MetricsRegistry& registry() const { return registry_; }

 private:
  int stages_;
  monitor::MetricsRegistry registry_;
  std::unique_ptr<monitor::MetricsServer> server_;   // after the registry it reads
};

}  // namespace pw::train
