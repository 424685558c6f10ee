// --shard-optimizer (/replicas/optimizer_state sharded, dataparallel/bucket_reducer.h) trains what
// the replicated optimizer trains, holds each stage's optimizer state once over its replicas, and
// writes checkpoints that resume under any replica count either way.
//
// Which results are bitwise equal: with 2 replicas a sum of two gradients does not depend on its
// order, so the reduce-scatter gives the all-reduce's bits and sharded training is bitwise the
// replicated one. With 4 replicas Gloo's reduce and all-reduce add in other orders (last bits
// differ), and with clipping the norm is summed from the owners' shares in another order: there
// the losses agree within 1e-6 relative.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <random>
#include <set>

#include <boost/test/unit_test.hpp>

#include "job_test_util.h"
#include "kernels/safetensors.h"
#include "models/zoo/model_spec.h"
#include "partition/model_description.h"
#include "train/embedded_job.h"
#include "train/fault_injection.h"
#include "train/job_plan.h"

using namespace pw;
using pw::test::JobShape;
using pipeline::ScheduleKind;
namespace fs = std::filesystem;

namespace {

constexpr int kSteps = 6;

partition::ModelDescription untied_mlp() {
  auto m = test::tied_mlp();
  m.name = "mlp";
  m.tied.clear();
  return m;
}

struct Variant {
  int replicas = 2;
  dp::OptimizerState state = dp::OptimizerState::Replicated;
  models::OptimizerKind optimizer = models::OptimizerKind::Sgd;
  ScheduleKind schedule = ScheduleKind::OneFOneB;
  std::string recompute = "none";
  double clip = 0.0;
  models::Precision precision = models::Precision::Fp32;
  bool tied = true;
};

train::JobConfig job(const Variant& v) {
  JobShape shape{v.schedule, 2, 2, v.schedule == ScheduleKind::Interleaved ? 2 : 1, {}};
  shape.recompute = v.recompute;
  shape.replicas = v.replicas;
  auto c = test::job_of(v.tied ? test::tied_mlp() : untied_mlp(), shape, 16);
  c.data.steps = kSteps;
  c.data.eval_batches = 1;
  c.replicas.bucket_bytes = 2048;   // several buckets, parameters cut between owners
  c.replicas.optimizer_state = v.state;
  c.optimizer.kind = v.optimizer;
  if (v.optimizer == models::OptimizerKind::Adam) c.optimizer.lr = 0.01;
  c.optimizer.weight_decay = 0.01;
  c.recovery.clip_grad_norm = v.clip;
  c.numerics.precision = v.precision;
  return c;
}

Variant sharded(Variant v) {
  v.state = dp::OptimizerState::Sharded;
  return v;
}

void check_close(const std::vector<double>& a, const std::vector<double>& b, double relative) {
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    BOOST_TEST(std::abs(a[i] - b[i]) <= relative * std::abs(a[i]), "step " << i << ": " << a[i] << " vs " << b[i]);
}

struct Scratch {
  fs::path path = fs::temp_directory_path() / ("pw_shard_optimizer_" + std::to_string(::getpid()));
  Scratch() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Scratch() { fs::remove_all(path); }
};

// Every tensor of every file of the checkpoint of step `step` under `dir`, by file/name.
std::map<std::string, std::vector<double>> checkpoint_tensors(const fs::path& dir, std::int64_t step) {
  std::map<std::string, std::vector<double>> out;
  for (const auto& entry : fs::directory_iterator(dir / train::checkpoint_folder_name(step)))
    if (entry.path().extension() == ".safetensors")
      for (const auto& [name, t] : kernels::load_safetensors(entry.path().string()))
        out[entry.path().filename().string() + "/" + name] = t.to_double_vector();
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(shard_optimizer)

BOOST_AUTO_TEST_CASE(sharded_state_trains_what_replicated_state_trains_for_sgd_and_adam) {
  for (const auto optimizer : {models::OptimizerKind::Sgd, models::OptimizerKind::Adam})
    for (const int replicas : {1, 2, 4}) {
      BOOST_TEST_CONTEXT(enum_name(optimizer) << ", " << replicas << " replicas") {
        Variant v;
        v.optimizer = optimizer;
        v.replicas = replicas;
        const auto replicated = test::step_losses(job(v));
        const auto shard = test::step_losses(job(sharded(v)));
        BOOST_REQUIRE_EQUAL(shard.size(), static_cast<std::size_t>(kSteps));
        if (replicas <= 2) BOOST_TEST(shard == replicated, "bitwise with " << replicas << " replicas");
        else check_close(replicated, shard, 1e-6);
      }
    }
}

BOOST_AUTO_TEST_CASE(every_schedule_with_recomputation_and_clipping) {
  for (const auto schedule : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved,
                              ScheduleKind::ZeroBubbleH1})
    for (const int replicas : {2, 4}) {
      BOOST_TEST_CONTEXT(enum_name(schedule) << ", " << replicas << " replicas") {
        Variant v;
        v.schedule = schedule;
        v.replicas = replicas;
        v.optimizer = models::OptimizerKind::Adam;
        v.recompute = "all";
        v.clip = 0.05;   // below the gradients' norm: every step is clipped
        check_close(test::step_losses(job(v)), test::step_losses(job(sharded(v))), 1e-6);
      }
    }
}

BOOST_AUTO_TEST_CASE(bf16_with_clipping) {
  for (const int replicas : {2, 4}) {
    BOOST_TEST_CONTEXT(replicas << " replicas") {
      Variant v;
      v.replicas = replicas;
      v.optimizer = models::OptimizerKind::Adam;
      v.precision = models::Precision::Bf16;
      v.clip = 0.05;
      check_close(test::step_losses(job(v)), test::step_losses(job(sharded(v))), 1e-6);
    }
  }
}

// --sync-batch-norm's statistics go over their own collective beside the sharded gradients':
// ResNet-18's batch norms train alike (2 replicas: bitwise).
BOOST_AUTO_TEST_CASE(synchronised_batch_norm_beside_sharded_state) {
  models::ModelOptions mo;
  mo.width = 8;
  const auto model = partition::describe(models::make_model_spec("resnet18", mo));
  auto losses = [&](dp::OptimizerState state) {
    JobShape shape{ScheduleKind::OneFOneB, 2, 2, 1, {}};
    shape.replicas = 2;
    auto c = test::job_of(model, shape, 16);
    c.data.synthetic_size = 64;
    c.data.steps = 3;
    c.data.eval_batches = 1;
    c.replicas.sync_batch_norm = true;
    c.replicas.optimizer_state = state;
    c.optimizer.kind = models::OptimizerKind::Adam;
    c.optimizer.lr = 0.001;
    return test::step_losses(c);
  };
  const auto replicated = losses(dp::OptimizerState::Replicated);
  BOOST_TEST(replicated.size() == 3u);
  BOOST_TEST(losses(dp::OptimizerState::Sharded) == replicated);
}

// Each replica holds the Adam moments of its slices only: the replicas' state adds up to the
// replicated optimizer's, element for element, and none holds more than its share and a bucket
// segment's alignment.
BOOST_AUTO_TEST_CASE(a_replica_holds_optimizer_state_for_its_own_share_only) {
  for (const int replicas : {2, 4}) {
    BOOST_TEST_CONTEXT(replicas << " replicas") {
      Variant v;
      v.replicas = replicas;
      v.optimizer = models::OptimizerKind::Adam;
      v.tied = false;
      train::EmbeddedJob whole(train::plan_job(job(v)));
      train::EmbeddedJob shard(train::plan_job(job(sharded(v))));
      for (int stage = 0; stage < 2; ++stage) {
        const auto all = whole.engine(stage).executor().optimizer().state_bytes();
        std::int64_t sum = 0;
        for (int r = 0; r < replicas; ++r) {
          const int rank = r * 2 + stage;
          BOOST_TEST(whole.engine(rank).executor().optimizer().state_bytes() == all);   // every replica: all of it
          const auto mine = shard.engine(rank).executor().optimizer().state_bytes();
          const auto buckets = static_cast<std::int64_t>(whole.engine(rank).executor().parameters().size());
          BOOST_TEST(mine <= all / replicas + buckets * 64 * 8, "stage " << stage << ", replica " << r);
          BOOST_TEST(mine < all);
          sum += mine;
        }
        BOOST_TEST(sum == all, "stage " << stage);
      }
    }
  }
}

// A sharded job's checkpoint holds the same tensors as a replicated job's; either resumes under
// another replica count, sharded or not, and goes on as the uninterrupted job would.
BOOST_AUTO_TEST_CASE(checkpoints_resume_across_sharding_and_replica_counts) {
  Scratch scratch;
  Variant v;
  v.optimizer = models::OptimizerKind::Adam;
  v.tied = true;
  auto save = [&](const Variant& w, const std::string& name) {
    auto c = job(w);
    c.checkpoints.dir = (scratch.path / name).string();
    c.checkpoints.every_steps = 3;
    c.checkpoints.keep = 10;
    return test::step_losses(c);
  };
  const auto replicated_run = save(v, "replicated");
  const auto sharded_run = save(sharded(v), "sharded");
  BOOST_TEST(replicated_run == sharded_run);
  const auto a = checkpoint_tensors(scratch.path / "replicated", 3);
  const auto b = checkpoint_tensors(scratch.path / "sharded", 3);
  BOOST_TEST(a.size() == b.size());
  bool has_state = false;
  for (const auto& [name, values] : a) {
    BOOST_TEST_CONTEXT(name) {
      BOOST_REQUIRE(b.count(name));
      BOOST_TEST(b.at(name) == values);   // 2 replicas: bitwise
      if (name.find("optimizer/") != std::string::npos && name.find("exp_avg_sq") != std::string::npos) has_state = true;
    }
  }
  BOOST_TEST(has_state);
  auto resume = [&](Variant w, const std::string& from) {
    auto c = job(w);
    c.checkpoints.resume = (scratch.path / from / train::checkpoint_folder_name(3)).string();
    return test::step_losses(c);
  };
  const std::vector<double> tail(replicated_run.begin() + 3, replicated_run.end());
  // Same replica count, the other way of keeping the state: the uninterrupted run's bits.
  BOOST_TEST(resume(v, "sharded") == tail);
  BOOST_TEST(resume(sharded(v), "replicated") == tail);
  // Other replica counts: as the replicated job of that count resumed from the same checkpoint.
  for (const int replicas : {1, 4}) {
    BOOST_TEST_CONTEXT(replicas << " replicas") {
      Variant w = v;
      w.replicas = replicas;
      const auto reference = resume(w, "replicated");
      BOOST_TEST(resume(w, "sharded") == reference);
      check_close(reference, resume(sharded(w), "sharded"), 1e-6);
      check_close(tail, reference, 1e-4);   // another replica count: the same training
    }
  }
}

// A non-finite gradient on a replica that is not replica 0, in a slice it owns, skips the step
// everywhere; after two such steps in a row every rank rolls back to the newest checkpoint, whose
// sharded state each replica takes its slices of. The sharded job goes through it as the
// replicated one does, bit for bit (2 replicas).
BOOST_AUTO_TEST_CASE(non_finite_steps_are_skipped_and_rolled_back_alike) {
  Scratch scratch;
  struct Reset {
    ~Reset() { train::set_fault_hooks({}); }
  } reset;
  auto run = [&](const Variant& v, const std::string& name) {
    // Steps 4 and 5 the first time they are made (not again after the rollback).
    auto fired = std::make_shared<std::set<std::int64_t>>();
    train::FaultHooks hooks;
    hooks.fault = [fired](train::FaultKind kind, std::int64_t step, int rank) {
      return kind == train::FaultKind::NonfiniteGradient && rank == 3 && (step == 4 || step == 5) &&
             fired->insert(step).second;
    };
    train::set_fault_hooks(hooks);
    auto c = job(v);
    c.data.steps = 8;
    c.checkpoints.dir = (scratch.path / name).string();
    c.checkpoints.every_steps = 1;
    c.recovery.max_bad_steps = 2;
    std::vector<std::pair<double, bool>> out;
    train::FitOptions fit;
    fit.progress = false;
    train::FitCallbacks callbacks;
    callbacks.on_step = [&](const train::StepEvent& e) { out.emplace_back(e.outcome->loss, e.outcome->skipped); };
    train::run_job(c, fit, callbacks);
    return out;
  };
  Variant v;
  v.optimizer = models::OptimizerKind::Adam;
  const auto replicated = run(v, "replicated");
  const auto shard = run(sharded(v), "sharded");
  int skipped = 0;
  for (const auto& [loss, skip] : shard) skipped += skip ? 1 : 0;
  BOOST_TEST(skipped == 2);
  BOOST_TEST(shard.size() > 8u, "the rolled-back steps are made again");
  BOOST_TEST(shard == replicated);
}

BOOST_AUTO_TEST_SUITE_END()
