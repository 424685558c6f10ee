// --shard-optimizer (/replicas/optimizer_state sharded, dataparallel/bucket_reducer.h) trains what
// the replicated optimizer trains, holds each stage's optimizer state once over its replicas, and
// writes checkpoints that resume under any replica count either way.
//
// Which results are bitwise equal: with 2 replicas a sum of two gradients does not depend on its
// order, so the reduce-scatter gives the all-reduce's bits and sharded training is bitwise the
// replicated one. With 4 replicas Gloo's reduce and all-reduce add in other orders (last bits
// differ), and with clipping the norm is summed from the owners' shares in another order: there
// the losses agree within 1e-6 relative. Under bf16/fp16 the fp32 masters are sharded too and
// updated by the same elementwise kernels, then rounded as compute copies are: the same holds.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <memory>
#include <random>
#include <set>

#include <boost/test/unit_test.hpp>

#include "tests/train/optimizer_variants.h"
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

constexpr int kSteps = test::kVariantSteps;
using Variant = test::OptimizerVariant;
using test::check_close;
using test::sharded;

train::JobConfig job(const Variant& v) { return test::optimizer_job(v); }

struct Scratch : test::ScratchFolder {
  Scratch() : ScratchFolder("shard_optimizer") {}
};

// Each step's loss, and what every rank held by kind at its peak after the last step.
std::pair<std::vector<double>, std::vector<train::RankMemory>> losses_and_memory(const train::JobConfig& c) {
  std::pair<std::vector<double>, std::vector<train::RankMemory>> out;
  train::FitOptions fit;
  fit.progress = false;
  train::FitCallbacks callbacks;
  callbacks.on_step = [&](const train::StepEvent& e) {
    out.first.push_back(e.outcome->loss);
    out.second = e.outcome->rank_memory;
  };
  train::run_job(c, fit, callbacks);
  return out;
}

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
    return test::losses_with_checkpoints(job(w), scratch.path / name);
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
  auto run = [&](const Variant& v, const std::string& name, pipeline::UpdateValidation validation) {
    auto c = job(v);
    c.recovery.update_validation = validation;
    return test::run_with_a_rollback(c, scratch.path / name);
  };
  // bf16 with post-validation: the ranks that updated before the verdict undo it, 16-bit weights
  // and sharded fp32 masters alike.
  for (const auto& [precision, validation] :
       {std::pair{models::Precision::Fp32, pipeline::UpdateValidation::Auto},
        std::pair{models::Precision::Bf16, pipeline::UpdateValidation::After}}) {
    BOOST_TEST_CONTEXT(enum_name(precision) << ", validation " << enum_name(validation)) {
      Variant v;
      v.optimizer = models::OptimizerKind::Adam;
      v.precision = precision;
      const auto replicated = run(v, "replicated", validation);
      const auto shard = run(sharded(v), "sharded", validation);
      fs::remove_all(scratch.path / "replicated");
      fs::remove_all(scratch.path / "sharded");
      int skipped = 0;
      for (const auto& [loss, skip] : shard) skipped += skip ? 1 : 0;
      BOOST_TEST(skipped == 2);
      BOOST_TEST(shard.size() > 8u, "the rolled-back steps are made again");
      BOOST_TEST(shard == replicated);
    }
  }
}

// Mixed precision: each replica keeps the fp32 master weights of its own slices only (the linear
// weights' 16-bit copies are whole everywhere, their masters divided), updates them there and
// all-gathers the 16-bit weights. The losses are the replicated job's: bitwise with 2 replicas
// (the same sums, and the same rounding of the same updated masters), within 1e-6 with 4.
BOOST_AUTO_TEST_CASE(mixed_precision_masters_are_sharded_and_train_alike) {
  for (const auto precision : {models::Precision::Bf16, models::Precision::Fp16})
    for (const int replicas : {2, 4}) {
      BOOST_TEST_CONTEXT(enum_name(precision) << ", " << replicas << " replicas") {
        Variant v;
        v.replicas = replicas;
        v.optimizer = models::OptimizerKind::Adam;
        v.precision = precision;
        const auto [replicated, replicated_memory] = losses_and_memory(job(v));
        const auto [shard, shard_memory] = losses_and_memory(job(sharded(v)));
        BOOST_REQUIRE_EQUAL(shard.size(), static_cast<std::size_t>(kSteps));
        if (replicas == 2) BOOST_TEST(shard == replicated, "bitwise with 2 replicas");
        else check_close(replicated, shard, 1e-6);
        // What each rank held by kind: the masters shrink (allocator blocks, which a cached block up
        // to twice the size may serve; each_master_element_lives_on_one_replica counts exactly).
        BOOST_REQUIRE_EQUAL(shard_memory.size(), replicated_memory.size());
        std::int64_t all = 0, mine = 0;
        for (std::size_t rank = 0; rank < shard_memory.size(); ++rank) {
          all += replicated_memory[rank].master_weights;
          mine += shard_memory[rank].master_weights;
        }
        BOOST_TEST(mine < all, mine << " bytes of masters over every rank, replicated " << all);
      }
    }
}

// A sharded bf16 stage holds its 16-bit weights in its buckets, in blocks of their own size: as
// many bytes as the replicated job's 16-bit copies and fp32 biases. (The buckets used to be made
// while the whole fp32 gradients they replace sat in the allocator's cache, whose blocks serve a
// request up to half their size: a 256 KiB fc_mid gradient held the 136 KiB of 16-bit weights.)
BOOST_AUTO_TEST_CASE(sharded_16_bit_weights_take_the_room_of_the_replicated_copies) {
  for (const int replicas : {2, 4}) {
    BOOST_TEST_CONTEXT(replicas << " replicas") {
      auto memory_of = [&](dp::OptimizerState state) {
        return losses_and_memory(
                   test::wide_mlp_job(replicas, state, models::Precision::Bf16, models::OptimizerOffload::None, 2))
            .second;
      };
      const auto replicated = memory_of(dp::OptimizerState::Replicated);
      const auto shard = memory_of(dp::OptimizerState::Sharded);
      BOOST_REQUIRE_EQUAL(shard.size(), replicated.size());
      // Each weight in a bucket starts on a 64-float boundary: a few hundred bytes more at most.
      constexpr std::int64_t kAlignment = 4 * 64 * 4;
      for (std::size_t rank = 0; rank < shard.size(); ++rank)
        BOOST_TEST(shard[rank].parameters <= replicated[rank].parameters + kAlignment,
                   "rank " << rank << ": " << shard[rank].parameters << " bytes of weights sharded, "
                           << replicated[rank].parameters << " replicated");
    }
  }
}

// Every element of a 16-bit weight has its fp32 master on exactly one replica: the replicas'
// master slices of a parameter add up to the parameter, and none holds the whole fp32 tensor.
BOOST_AUTO_TEST_CASE(each_master_element_lives_on_one_replica) {
  Variant v;
  v.replicas = 4;
  v.optimizer = models::OptimizerKind::Adam;
  v.precision = models::Precision::Bf16;
  v.tied = false;
  train::EmbeddedJob shard(train::plan_job(job(sharded(v))));
  int half_weights = 0;
  for (int stage = 0; stage < 2; ++stage) {
    const auto first = shard.engine(stage).executor().parameters();   // replica 0's
    std::int64_t whole_bytes = 0;
    std::vector<std::int64_t> master_bytes(static_cast<std::size_t>(v.replicas), 0);
    for (std::size_t i = 0; i < first.size(); ++i) {
      const auto* p = first[i];
      if (p->value.dtype() != kernels::DType::BF16) {
        BOOST_TEST((p->value.dtype() == kernels::DType::F32));   // biases compute in fp32
        continue;
      }
      ++half_weights;
      whole_bytes += p->value.numel() * 4;
      BOOST_TEST(p->compute.raw() == p->value.raw(), "the 16-bit copy is the weight itself");
      std::int64_t mastered = 0;
      for (int r = 0; r < v.replicas; ++r) {
        auto& executor = shard.engine(r * 2 + stage).executor();
        const auto slice = executor.optimizer().slice_of(executor.parameters().at(i));
        if (!slice) continue;
        BOOST_REQUIRE(slice->master.defined());
        BOOST_TEST((slice->master.dtype() == kernels::DType::F32));
        mastered += slice->master.numel();
        master_bytes[static_cast<std::size_t>(r)] += static_cast<std::int64_t>(slice->master.nbytes());
      }
      BOOST_TEST(mastered == p->value.numel(), p->name);
    }
    // A replica's share: 1/R, give or take a bucket segment's alignment (64 floats) per weight.
    for (int r = 0; r < v.replicas; ++r)
      BOOST_TEST(master_bytes[static_cast<std::size_t>(r)] <= whole_bytes / v.replicas + 4 * 64 * 4,
                 "stage " << stage << ", replica " << r << ": " << master_bytes[static_cast<std::size_t>(r)] << " of "
                          << whole_bytes << " bytes of masters");
  }
  BOOST_TEST(half_weights == 4);   // fc_in, fc_mid, fc_mid2, fc_out
}

// A bf16 sharded job's checkpoint holds the fp32 masters by name, bit for bit what the replicated
// job writes (2 replicas), and resumes into an unsharded job and under other replica counts.
BOOST_AUTO_TEST_CASE(mixed_precision_checkpoints_hold_whole_fp32_masters) {
  Scratch scratch;
  Variant v;
  v.optimizer = models::OptimizerKind::Adam;
  v.precision = models::Precision::Bf16;
  auto save = [&](const Variant& w, const std::string& name) {
    return test::losses_with_checkpoints(job(w), scratch.path / name);
  };
  const auto replicated_run = save(v, "replicated");
  const auto sharded_run = save(sharded(v), "sharded");
  BOOST_TEST(replicated_run == sharded_run);
  const auto a = checkpoint_tensors(scratch.path / "replicated", 3);
  const auto b = checkpoint_tensors(scratch.path / "sharded", 3);
  BOOST_TEST(a.size() == b.size());
  for (const auto& [name, values] : a) {
    BOOST_TEST_CONTEXT(name) {
      BOOST_REQUIRE(b.count(name));
      BOOST_TEST(b.at(name) == values);
    }
  }
  for (const auto& entry : fs::directory_iterator(scratch.path / "sharded" / train::checkpoint_folder_name(3)))
    if (entry.path().extension() == ".safetensors")
      for (const auto& [name, t] : kernels::load_safetensors(entry.path().string()))
        BOOST_TEST((t.dtype() == kernels::DType::F32), name << " is stored in fp32");
  auto resume = [&](Variant w, const std::string& from) {
    auto c = job(w);
    c.checkpoints.resume = (scratch.path / from / train::checkpoint_folder_name(3)).string();
    return test::step_losses(c);
  };
  const std::vector<double> tail(replicated_run.begin() + 3, replicated_run.end());
  BOOST_TEST(resume(v, "sharded") == tail);
  BOOST_TEST(resume(sharded(v), "replicated") == tail);
  BOOST_TEST(resume(sharded(v), "sharded") == tail);
  for (const int replicas : {1, 4}) {
    BOOST_TEST_CONTEXT(replicas << " replicas") {
      Variant w = v;
      w.replicas = replicas;
      const auto reference = resume(w, "replicated");
      BOOST_TEST(resume(w, "sharded") == reference);
      check_close(reference, resume(sharded(w), "sharded"), 1e-6);
    }
  }
}

// Tied weights are sharded too: each has a bucket of its own, so replica r of every stage holding
// it owns the same elements of it; the stages sum those segments only, each owner updates its
// slice, and the gather brings it to every replica. The owners' slices cover each tied weight
// once per stage, and the job trains as the replicated one, bitwise with 2 replicas, in fp32 and
// bf16.
BOOST_AUTO_TEST_CASE(tied_weights_are_sharded_alike_on_every_stage_holding_them) {
  for (const auto precision : {models::Precision::Fp32, models::Precision::Bf16}) {
    BOOST_TEST_CONTEXT(enum_name(precision)) {
      Variant v;
      v.optimizer = models::OptimizerKind::Adam;
      v.precision = precision;
      v.tied = true;
      {
        train::EmbeddedJob shard(train::plan_job(job(sharded(v))));
        // (name, stage) -> the owned (offset, length) of each replica.
        std::map<std::pair<std::string, int>, std::vector<std::pair<std::int64_t, std::int64_t>>> owned;
        std::map<std::string, std::int64_t> elements;
        for (int rank = 0; rank < 4; ++rank) {
          auto& executor = shard.engine(rank).executor();
          const auto share = executor.config().gradient_sync->update_share();
          BOOST_REQUIRE(share.has_value());
          for (const auto& [name, p] : executor.chunk(0).named_parameters()) {
            if (name != "fc_mid.weight" && name != "fc_mid2.weight") continue;
            BOOST_TEST(std::count(share->whole.begin(), share->whole.end(), p) == 0, name);
            elements[name] = p->value.numel();
            const auto slice = executor.optimizer().slice_of(p);
            owned[{name, rank % 2}].emplace_back(slice ? slice->offset : 0, slice ? slice->length : 0);
          }
        }
        BOOST_TEST(elements.size() == 2u);   // both tied weights
        for (const auto& [key, slices] : owned) {
          BOOST_TEST_CONTEXT(key.first << " on stage " << key.second) {
            BOOST_REQUIRE_EQUAL(slices.size(), 2u);   // one per replica
            BOOST_TEST(slices[0].second > 0);
            BOOST_TEST(slices[0].second < elements[key.first]);   // a share, not the whole
            BOOST_TEST(slices[0].second + slices[1].second == elements[key.first]);
          }
        }
        // The tie's members (one shape) are divided alike among the replicas, on whatever stage.
        for (const auto& [key, slices] : owned)
          BOOST_TEST((slices == owned.begin()->second), key.first << " on stage " << key.second);
      }
      BOOST_TEST(test::step_losses(job(sharded(v))) == test::step_losses(job(v)));
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
