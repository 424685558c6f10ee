#include "train/run_monitors.h"

#include <cmath>

#include "core/error.h"
#include "core/log.h"
#include "rpc/launch_env.h"
#include "train/engine.h"

namespace pw::train {

RunMonitors::RunMonitors(const Engine& engine, const FitOptions& o, std::int64_t first_step, std::int64_t total_steps) {
  const auto& plan = engine.plan();
  PW_INPUT_CHECK(std::isfinite(o.straggler_threshold) && o.straggler_threshold > 0 && o.straggler_window >= 1 &&
                     o.straggler_window <= 1000000,
                 "straggler threshold " << o.straggler_threshold << " and window " << o.straggler_window
                                        << ": expected a threshold above 0 (0.2: 20% slower) and a window of 1 step "
                                           "to 1000000");
  if (!o.tensorboard_dir.empty()) tensorboard_.emplace(o.tensorboard_dir);
  if (o.metrics_port >= 0) {
    // Another host can reach a non-loopback endpoint: it then asks for the job's token, as every
    // other link of the job does. A job with TLS serves HTTPS with its host's certificate.
    const std::string host = engine.links().bind_host();
    const auto& tls = plan.config.tls;
    metrics_.emplace(host, o.metrics_port, plan.schedule.stages, total_steps, first_step,
                     rpc::is_loopback_host(host) ? std::string() : engine.links().job_token(),
                     monitor::MetricsTls{tls.cert, tls.key});
    if (o.progress) log::outputf("metrics: %s", metrics_->url().c_str());
  }
  if (plan.replicas() > 1)
    stragglers_.emplace(plan.schedule.stages, plan.replicas(), o.straggler_threshold,
                        static_cast<int>(o.straggler_window));
}

void RunMonitors::step(StepFigures f, double step_wall_seconds) {
  if (stragglers_) {
    f.stragglers = stragglers_->add(f.step, f.outcome->rank_own_seconds, step_wall_seconds);
    f.straggler_cost_seconds = stragglers_->cost_seconds();
  }
  for (const auto& w : f.stragglers)
    PW_LOG(Warn, "straggler: rank " << w.rank << " (stage " << w.stage << ", replica " << w.replica << ") took "
                                    << w.own_seconds << " s per step over steps " << w.first_step << "-" << w.last_step
                                    << ", " << static_cast<int>(w.slower_by * 100 + 0.5)
                                    << "% more than its stage's other replicas (" << w.peer_seconds
                                    << " s); it cost the job about " << w.cost_seconds << " s");
  if (tensorboard_) tensorboard_->step(f);
  if (metrics_) metrics_->step(f);
}

void RunMonitors::evaluation(std::int64_t step, double accuracy, double loss) {
  if (tensorboard_) tensorboard_->evaluation(step, accuracy, loss);
  if (metrics_) metrics_->evaluation(accuracy, loss);
}

nlohmann::json RunMonitors::stragglers() const {
  return stragglers_ ? stragglers_->summary() : nlohmann::json::array();
}

}  // namespace pw::train
