// --offload-optimizer (/optimizer/offload host, models/host_offload.h): each rank's optimizer state
// lives in host memory and is updated there by the vectorised CPU optimizer, whose results are the
// reference update's bits. So an offloaded job trains to the same losses as the same job without
// offload, bit for bit, for every replica count with and without --shard-optimizer, every
// schedule, recomputation, clipping, bf16 and fp16, skips and rollbacks, and checkpoints that
// resume either way. On capped CPU devices the state is outside the cap: a job whose state does not
// fit its devices runs when offloaded.
#include <unistd.h>

#include <filesystem>
#include <memory>
#include <set>
#include <string>

#include <boost/test/unit_test.hpp>

#include "tests/train/optimizer_variants.h"
#include "kernels/host_ledger.h"
#include "kernels/runtime.h"
#include "train/embedded_job.h"
#include "train/fault_injection.h"
#include "train/job_config.h"
#include "train/job_plan.h"

using namespace pw;
using pw::test::JobShape;
using pipeline::ScheduleKind;
namespace fs = std::filesystem;

namespace {

constexpr int kSteps = test::kVariantSteps;
// Adam unless a test says otherwise.
struct Variant : test::OptimizerVariant {
  Variant() { optimizer = models::OptimizerKind::Adam; }
};
using test::offloaded;

train::JobConfig job(const Variant& v) { return test::optimizer_job(v); }

struct Scratch : test::ScratchFolder {
  Scratch() : ScratchFolder("offload_optimizer") {}
};

}  // namespace

BOOST_AUTO_TEST_SUITE(offload_optimizer)

// /optimizer/offload: written only when "host" (a job without it hashes as before), read back,
// and a bad name is a ConfigError naming the field and the accepted names.
BOOST_AUTO_TEST_CASE(the_config_field_round_trips_and_names_itself_in_errors) {
  train::JobConfig c;
  BOOST_TEST(!train::to_json(c)["optimizer"].contains("offload"));
  c.optimizer.offload = models::OptimizerOffload::Host;
  const auto j = train::to_json(c);
  BOOST_TEST(j["optimizer"]["offload"] == "host");
  BOOST_TEST((train::job_config_from_json(j).optimizer.offload == models::OptimizerOffload::Host));
  BOOST_TEST((train::plan_job(job(offloaded(Variant{}))).optimizer.offload == models::OptimizerOffload::Host));
  std::string error;
  try {
    train::job_config_from_json(nlohmann::json::parse(R"({"optimizer": {"offload": "disk"}})"));
  } catch (const train::ConfigError& e) {
    error = e.what();
  }
  BOOST_TEST(error == "/optimizer/offload: unknown optimizer offload 'disk'; accepted: none, host");
}

BOOST_AUTO_TEST_CASE(offloaded_state_trains_what_device_state_trains_bitwise) {
  for (const auto optimizer : {models::OptimizerKind::Sgd, models::OptimizerKind::Adam, models::OptimizerKind::Adagrad})
    for (const auto state : {dp::OptimizerState::Replicated, dp::OptimizerState::Sharded})
      for (const int replicas : {1, 2, 4}) {
        if (optimizer == models::OptimizerKind::Adagrad && replicas != 2) continue;
        BOOST_TEST_CONTEXT(enum_name(optimizer) << ", " << enum_name(state) << ", " << replicas << " replicas") {
          Variant v;
          v.optimizer = optimizer;
          v.state = state;
          v.replicas = replicas;
          const auto on_device = test::step_losses(job(v));
          const auto on_host = test::step_losses(job(offloaded(v)));
          BOOST_REQUIRE_EQUAL(on_host.size(), static_cast<std::size_t>(kSteps));
          BOOST_TEST(on_host == on_device);
        }
      }
}

// zb-h1 validates its updates after making them (post-validation): with a clip below the gradients'
// norm every step is undone and made again, clipped, through Optimizer::snapshot/restore.
BOOST_AUTO_TEST_CASE(every_schedule_with_recomputation_and_clipping_sharded_or_not) {
  for (const auto schedule : {ScheduleKind::GPipe, ScheduleKind::OneFOneB, ScheduleKind::Interleaved,
                              ScheduleKind::ZeroBubbleH1, ScheduleKind::ZeroBubbleV})
    for (const auto state : {dp::OptimizerState::Replicated, dp::OptimizerState::Sharded}) {
      BOOST_TEST_CONTEXT(enum_name(schedule) << ", " << enum_name(state)) {
        Variant v;
        v.schedule = schedule;
        v.state = state;
        v.recompute = "all";
        v.clip = 0.05;
        const auto on_device = test::step_losses(job(v));
        BOOST_REQUIRE_EQUAL(on_device.size(), static_cast<std::size_t>(kSteps));
        BOOST_TEST(test::step_losses(job(offloaded(v))) == on_device);
      }
    }
}

BOOST_AUTO_TEST_CASE(bf16_and_fp16_with_clipping) {
  for (const auto precision : {models::Precision::Bf16, models::Precision::Fp16})
    for (const auto state : {dp::OptimizerState::Replicated, dp::OptimizerState::Sharded}) {
      BOOST_TEST_CONTEXT(enum_name(precision) << ", " << enum_name(state)) {
        Variant v;
        v.precision = precision;
        v.state = state;
        v.clip = 0.05;
        BOOST_TEST(test::step_losses(job(offloaded(v))) == test::step_losses(job(v)));
      }
    }
}

// The offloaded state is counted for each rank's device as host memory, by kind, and not by the
// device's allocator: the ranks' host optimizer state adds up to what the device state was.
BOOST_AUTO_TEST_CASE(the_state_is_counted_as_host_memory_not_device_memory) {
  for (const auto state : {dp::OptimizerState::Replicated, dp::OptimizerState::Sharded}) {
    BOOST_TEST_CONTEXT(enum_name(state)) {
      Variant v;
      v.state = state;
      v.replicas = 2;
      const auto kind = static_cast<std::size_t>(kernels::MemoryKind::OptimizerState);
      std::vector<std::int64_t> host_before;
      for (int rank = 0; rank < 4; ++rank)
        host_before.push_back(kernels::host_memory_stats(kernels::Device::cpu(rank)).in_use_by_kind[kind]);
      train::EmbeddedJob host(train::plan_job(job(offloaded(v))));
      for (int rank = 0; rank < 4; ++rank) {
        BOOST_TEST_CONTEXT("rank " << rank) {
          auto& optimizer = host.engine(rank).executor().optimizer();
          const auto device = host.engine(rank).executor().parameters().front()->value.device();
          BOOST_TEST(device.str() == kernels::Device::cpu(rank).str());
          const auto held = kernels::host_memory_stats(device).in_use_by_kind[kind] - host_before[rank];
          BOOST_TEST(optimizer.state_bytes() > 0);
          BOOST_TEST(held == optimizer.state_bytes());
          BOOST_TEST(kernels::DeviceRuntime::get(device).allocator().stats().in_use_by_kind[kind] == 0);
        }
      }
    }
  }
}

// Checkpoints hold the state by name whichever way it was kept: an offloaded job's checkpoint
// resumes in a job without offload, and the other way round, as the uninterrupted job goes on.
BOOST_AUTO_TEST_CASE(checkpoints_resume_across_offload) {
  Scratch scratch;
  for (const auto state : {dp::OptimizerState::Replicated, dp::OptimizerState::Sharded}) {
    BOOST_TEST_CONTEXT(enum_name(state)) {
      Variant v;
      v.state = state;
      const std::string tag(enum_name(state));
      auto save = [&](const Variant& w, const std::string& name) {
        auto c = job(w);
        c.checkpoints.dir = (scratch.path / name).string();
        c.checkpoints.every_steps = 3;
        c.checkpoints.keep = 10;
        return test::step_losses(c);
      };
      const auto device_run = save(v, tag + "-device");
      BOOST_TEST(save(offloaded(v), tag + "-host") == device_run);
      auto resume = [&](const Variant& w, const std::string& from) {
        auto c = job(w);
        c.checkpoints.resume = (scratch.path / from / train::checkpoint_folder_name(3)).string();
        return test::step_losses(c);
      };
      const std::vector<double> tail(device_run.begin() + 3, device_run.end());
      BOOST_TEST(resume(v, tag + "-host") == tail);
      BOOST_TEST(resume(offloaded(v), tag + "-device") == tail);
      BOOST_TEST(resume(offloaded(v), tag + "-host") == tail);
    }
  }
}

// Non-finite gradients skip steps and, twice in a row, roll every rank back to the newest
// checkpoint: the offloaded state is restored from it as the device state is.
BOOST_AUTO_TEST_CASE(non_finite_steps_are_skipped_and_rolled_back_alike) {
  Scratch scratch;
  auto run = [&](const Variant& v, const std::string& name) {
    return test::run_with_a_rollback(job(v), scratch.path / name);
  };
  for (const auto state : {dp::OptimizerState::Replicated, dp::OptimizerState::Sharded}) {
    BOOST_TEST_CONTEXT(enum_name(state)) {
      Variant v;
      v.state = state;
      const std::string tag(enum_name(state));
      const auto on_device = run(v, tag + "-device");
      const auto on_host = run(offloaded(v), tag + "-host");
      int skipped = 0;
      for (const auto& [loss, skip] : on_host) skipped += skip ? 1 : 0;
      BOOST_TEST(skipped == 2);
      BOOST_TEST(on_host.size() > 8u, "the rolled-back steps are made again");
      BOOST_TEST(on_host == on_device);
    }
  }
}

// Adam's state is twice the weights: a cap between the offloaded job's peak and the device-state
// job's peak refuses the job without offload (out of memory) and runs it offloaded, to the losses
// of the uncapped job.
BOOST_AUTO_TEST_CASE(a_job_whose_state_does_not_fit_the_device_cap_fits_offloaded) {
  const auto wide = test::mlp_of("wide-mlp",
                                 {{"flatten", 0, 0}, {"fc_in", 144, 256}, {"relu1", 0, 0}, {"fc_mid", 256, 256},
                                  {"relu2", 0, 0}, {"fc_out", 256, 10}},
                                 {});
  auto make = [&](models::OptimizerOffload offload, std::int64_t cap) {
    JobShape shape{ScheduleKind::OneFOneB, 2, 2, 1, {}};
    shape.first_device = 8;   // devices of their own: the caps stay on them
    auto c = test::job_of(wide, shape, 16);
    c.data.steps = 3;
    c.data.eval_batches = 1;
    c.optimizer.kind = models::OptimizerKind::Adam;
    c.optimizer.lr = 0.001;
    c.optimizer.offload = offload;
    c.resources.device_memory = cap;
    return c;
  };
  struct Uncap {
    ~Uncap() {
      for (int d = 8; d < 10; ++d) kernels::DeviceRuntime::get(kernels::Device::cpu(d)).set_memory_cap(0);
    }
  } uncap;
  auto peaks = [&](models::OptimizerOffload offload, std::vector<double>* losses) {
    std::vector<std::int64_t> peak(2, 0), state(2, 0);
    train::FitOptions fit;
    fit.progress = false;
    train::FitCallbacks callbacks;
    callbacks.on_step = [&](const train::StepEvent& e) {
      if (losses) losses->push_back(e.outcome->loss);
      for (const auto& m : e.outcome->rank_memory) {
        peak[static_cast<std::size_t>(m.rank)] = std::max(peak[static_cast<std::size_t>(m.rank)], m.peak_bytes);
        state[static_cast<std::size_t>(m.rank)] = m.optimizer_state;
      }
    };
    train::run_job(make(offload, 0), fit, callbacks);
    return std::pair{peak, state};
  };
  std::vector<double> uncapped;
  const auto [device_peak, device_state] = peaks(models::OptimizerOffload::None, &uncapped);
  const auto [host_peak, host_state] = peaks(models::OptimizerOffload::Host, nullptr);
  for (int rank = 0; rank < 2; ++rank) {
    BOOST_TEST(device_state[rank] > 0);
    BOOST_TEST(host_state[rank] == 0);   // none of it on the device
    BOOST_TEST(host_peak[rank] + device_state[rank] / 2 < device_peak[rank]);
  }
  // Half the state above the offloaded job's larger peak: the state does not fit beside the rest.
  const auto cap = std::max(host_peak[0], host_peak[1]) + std::min(device_state[0], device_state[1]) / 2;
  BOOST_TEST_MESSAGE("peaks on the device: " << device_peak[0] << ", " << device_peak[1] << " bytes with its state, "
                                             << host_peak[0] << ", " << host_peak[1] << " offloaded; cap " << cap);
  BOOST_CHECK_EXCEPTION(test::step_losses(make(models::OptimizerOffload::None, cap)), std::exception,
                        [](const std::exception& e) {
                          return std::string(e.what()).find("out of memory") != std::string::npos;
                        });
  BOOST_TEST(test::step_losses(make(models::OptimizerOffload::Host, cap)) == uncapped);
}

BOOST_AUTO_TEST_SUITE_END()
