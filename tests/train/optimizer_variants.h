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

#include "pipeline/schedule.h"
#include "tests/train/job_test_util.h"

namespace pw::test {

inline constexpr int kVariantSteps = 6;

inline partition::ModelDescription untied_mlp() {
  auto m = tied_mlp();
  m.name = "mlp";
  m.tied.clear();
  return m;
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
