#pragma once
// The small jobs the optimizer-state tests compare (replicated, sharded, offloaded): tied_mlp, or
// the same MLP untied, as 2 stages x 2 micro-batches of 16 samples, with gradient buckets small
// enough that parameters are cut between owners when the state is sharded.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <boost/test/unit_test.hpp>

#include <memory>
#include <set>
#include <utility>

#include "pipeline/schedule.h"
#include "pipewright/fit.h"
#include "tests/train/job_test_util.h"
#include "train/fault_injection.h"

namespace pw::test {

inline constexpr int kVariantSteps = 6;

inline partition::ModelDescription untied_mlp() {
  auto m = tied_mlp();
  m.name = "mlp";
  m.tied.clear();
  return m;
}

// Adam (lr 0.001) on a 2-stage MLP wide enough (a 256x256 layer) that its weights' allocator
// blocks are not lost in rounding: 1F1B over 2 micro-batches of a batch of 16, `replicas` pipelines
// on cpu:first_device and up.
inline train::JobConfig wide_mlp_job(int replicas, dp::OptimizerState state, models::Precision precision,
                                     models::OptimizerOffload offload, int steps, int first_device = 0) {
  const auto wide = mlp_of("wide-mlp",
                           {{"flatten", 0, 0}, {"fc_in", 144, 256}, {"relu1", 0, 0}, {"fc_mid", 256, 256},
                            {"relu2", 0, 0}, {"fc_out", 256, 10}},
                           {});
  JobShape shape{pipeline::ScheduleKind::OneFOneB, 2, 2, 1, {}};
  shape.replicas = replicas;
  shape.first_device = first_device;
  auto c = job_of(wide, shape, 16);
  c.data.steps = steps;
  c.data.eval_batches = 0;
  c.replicas.optimizer_state = state;
  c.optimizer.kind = models::OptimizerKind::Adam;
  c.optimizer.lr = 0.001;
  c.optimizer.offload = offload;
  c.numerics.precision = precision;
  return c;
}

struct OptimizerVariant {
  int replicas = 2;
  dp::OptimizerState state = dp::OptimizerState::Replicated;
  models::OptimizerKind optimizer = models::OptimizerKind::Sgd;
  pipeline::ScheduleKind schedule = pipeline::ScheduleKind::OneFOneB;
  std::string recompute = "none";
  double clip = 0.0;
  models::Precision precision = models::Precision::Fp32;
  bool tied = true;
  models::OptimizerOffload offload = models::OptimizerOffload::None;
};

inline train::JobConfig optimizer_job(const OptimizerVariant& v) {
  JobShape shape{v.schedule, 2, 2, pipeline::default_chunks(v.schedule), {}};
  shape.recompute = v.recompute;
  shape.replicas = v.replicas;
  auto c = job_of(v.tied ? tied_mlp() : untied_mlp(), shape, 16);
  c.data.steps = kVariantSteps;
  c.data.eval_batches = 1;
  c.replicas.bucket_bytes = 2048;   // several buckets, parameters cut between owners when sharded
  c.replicas.optimizer_state = v.state;
  c.optimizer.kind = v.optimizer;
  if (v.optimizer == models::OptimizerKind::Adam) c.optimizer.lr = 0.01;
  c.optimizer.weight_decay = 0.01;
  c.optimizer.offload = v.offload;
  c.recovery.clip_grad_norm = v.clip;
  c.numerics.precision = v.precision;
  return c;
}

template <typename V>
V sharded(V v) {
  v.state = dp::OptimizerState::Sharded;
  return v;
}

template <typename V>
V offloaded(V v) {
  v.offload = models::OptimizerOffload::Host;
  return v;
}

inline void check_close(const std::vector<double>& a, const std::vector<double>& b, double relative) {
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    BOOST_TEST(std::abs(a[i] - b[i]) <= relative * std::abs(a[i]), "step " << i << ": " << a[i] << " vs " << b[i]);
}

// Job `c`'s losses with a checkpoint every 3 steps (the last 10 kept) in `dir`, to resume from.
inline std::vector<double> losses_with_checkpoints(train::JobConfig c, const std::filesystem::path& dir) {
  c.checkpoints.dir = dir.string();
  c.checkpoints.every_steps = 3;
  c.checkpoints.keep = 10;
  return step_losses(c);
}

// Job `c` for 8 steps with a checkpoint after each, whose rank 3 turns non-finite at steps 4
// and 5 the first time it makes them (not again after the rollback to step 3 that the second
// bad step in a row sets off): each step's loss and whether it was skipped, in the order made.
inline std::vector<std::pair<double, bool>> run_with_a_rollback(train::JobConfig c, const std::filesystem::path& dir) {
  struct Reset {
    ~Reset() { train::set_fault_hooks({}); }
  } reset;
  auto fired = std::make_shared<std::set<std::int64_t>>();
  train::FaultHooks hooks;
  hooks.fault = [fired](train::FaultKind kind, std::int64_t step, int rank) {
    return kind == train::FaultKind::NonfiniteGradient && rank == 3 && (step == 4 || step == 5) &&
           fired->insert(step).second;
  };
  train::set_fault_hooks(hooks);
  c.data.steps = 8;
  c.checkpoints.dir = dir.string();
  c.checkpoints.every_steps = 1;
  c.recovery.max_bad_steps = 2;
  std::vector<std::pair<double, bool>> out;
  train::FitOptions fit;
  fit.progress = false;
  train::FitCallbacks callbacks;
  callbacks.on_step = [&](const train::StepEvent& e) { out.emplace_back(e.outcome->loss, e.outcome->skipped); };
  train::run_job(c, fit, callbacks);
  return out;
}

// A fresh folder under the system's temporary one for this process, removed at the end.
struct ScratchFolder {
  std::filesystem::path path;
  explicit ScratchFolder(const std::string& tag)
      : path(std::filesystem::temp_directory_path() / ("pw_" + tag + "_" + std::to_string(::getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchFolder() { std::filesystem::remove_all(path); }
};

}  // namespace pw::test
