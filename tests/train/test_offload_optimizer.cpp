// --offload-optimizer (/optimizer/offload host, models/host_offload.h): each rank's optimizer state
// lives in host memory and is updated there by the vectorised CPU optimizer, whose results are the
// reference update's bits. So an offloaded job trains to the same losses as the same job without
// offload, bit for bit, for every replica count with and without --shard-optimizer, every
// schedule, recomputation, clipping, bf16 and fp16, skips and rollbacks, and checkpoints that
// resume either way. On capped CPU devices the state is outside the cap: a job whose state does not
// fit its devices runs when offloaded.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
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

// Offloaded under bf16/fp16 the fp32 masters live in host memory and the host rounds them into the
// device's 16-bit weights: the same bits as the device's masters and rounding, with one replica or
// two, sharded or not.
BOOST_AUTO_TEST_CASE(bf16_and_fp16_with_clipping) {
  for (const auto precision : {models::Precision::Bf16, models::Precision::Fp16})
    for (const auto state : {dp::OptimizerState::Replicated, dp::OptimizerState::Sharded})
      for (const int replicas : {1, 2}) {
        if (state == dp::OptimizerState::Sharded && replicas == 1) continue;
        BOOST_TEST_CONTEXT(enum_name(precision) << ", " << enum_name(state) << ", " << replicas << " replicas") {
          Variant v;
          v.precision = precision;
          v.state = state;
          v.replicas = replicas;
          v.clip = 0.05;
          const auto on_device = test::step_losses(job(v));
          BOOST_REQUIRE_EQUAL(on_device.size(), static_cast<std::size_t>(kSteps));
          BOOST_TEST(test::step_losses(job(offloaded(v))) == on_device);
        }
      }
}

// Offloaded under bf16 the fp32 masters are host memory counted for the rank (kind
// master_weights), none of them on the device, which keeps the 16-bit weights as the parameters'
// values; the summary shows master_weights 0 on every rank and the host bytes that hold them.
BOOST_AUTO_TEST_CASE(the_fp32_masters_are_host_memory_not_device_memory) {
  const auto masters = static_cast<std::size_t>(kernels::MemoryKind::MasterWeights);
  for (const auto state : {dp::OptimizerState::Replicated, dp::OptimizerState::Sharded})
    for (const int replicas : {1, 2}) {
      if (state == dp::OptimizerState::Sharded && replicas == 1) continue;
      BOOST_TEST_CONTEXT(enum_name(state) << ", " << replicas << " replicas") {
        Variant v;
        v.precision = models::Precision::Bf16;
        v.state = state;
        v.replicas = replicas;
        v.tied = false;
        const int ranks = 2 * replicas;
        auto last_memory = [&](const Variant& w) {
          std::vector<train::RankMemory> out;
          train::FitOptions fit;
          fit.progress = false;
          train::FitCallbacks callbacks;
          callbacks.on_step = [&](const train::StepEvent& e) { out = e.outcome->rank_memory; };
          train::run_job(job(w), fit, callbacks);
          return out;
        };
        const auto device = last_memory(v);
        const auto host = last_memory(offloaded(v));
        BOOST_REQUIRE_EQUAL(device.size(), static_cast<std::size_t>(ranks));
        BOOST_REQUIRE_EQUAL(host.size(), static_cast<std::size_t>(ranks));
        for (int r = 0; r < ranks; ++r) {
          BOOST_TEST_CONTEXT("rank " << r) {
            const auto& d = device[static_cast<std::size_t>(r)];
            const auto& h = host[static_cast<std::size_t>(r)];
            BOOST_TEST(d.master_weights > 0);
            BOOST_TEST(d.host_bytes == 0);
            BOOST_TEST(h.master_weights == 0);
            BOOST_TEST(h.optimizer_state == 0);
            // The masters and the state left the device: the host holds at least their exact bytes
            // (the device counted them in rounded blocks).
            BOOST_TEST(h.host_bytes > 0);
            BOOST_TEST(h.peak_bytes < d.peak_bytes);
          }
        }
        // Exactly: the masters' bytes held on the host under master_weights, none on the device.
        std::vector<std::int64_t> host_before;
        for (int r = 0; r < ranks; ++r)
          host_before.push_back(kernels::host_memory_stats(kernels::Device::cpu(r)).in_use_by_kind[masters]);
        train::EmbeddedJob offloaded_job(train::plan_job(job(offloaded(v))));
        for (int r = 0; r < ranks; ++r) {
          BOOST_TEST_CONTEXT("rank " << r) {
            auto& executor = offloaded_job.engine(r).executor();
            const auto device_of_rank = kernels::Device::cpu(r);
            std::int64_t master_bytes = 0, copied_bytes = 0;
            for (auto* p : executor.parameters()) {
              const auto master = executor.optimizer().master_of(p);
              if (master) master_bytes += static_cast<std::int64_t>(master->master.nbytes());
              if (p->compute.defined()) {
                copied_bytes += p->value.numel() * 4;
                BOOST_TEST((p->value.dtype() == kernels::DType::BF16), p->name << " keeps " << p->value.describe());
                BOOST_TEST(p->compute.raw() == p->value.raw());
              }
            }
            const auto held = kernels::host_memory_stats(device_of_rank).in_use_by_kind[masters] - host_before[r];
            BOOST_TEST(master_bytes > 0);
            BOOST_TEST(kernels::DeviceRuntime::get(device_of_rank).allocator().stats().in_use_by_kind[masters] == 0);
            if (state == dp::OptimizerState::Replicated) {
              BOOST_TEST(held == master_bytes);    // every weight with a 16-bit copy has its master here
              BOOST_TEST(held == copied_bytes);
            } else {
              BOOST_TEST(held >= master_bytes);    // this replica's segments, padded to alignment
              BOOST_TEST(held < copied_bytes);
            }
          }
        }
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
// resumes in a job without offload, and the other way round, as the uninterrupted job goes on;
// under bf16 too, where the offloaded job's fp32 masters are host memory (whole, or sharded).
BOOST_AUTO_TEST_CASE(checkpoints_resume_across_offload) {
  Scratch scratch;
  for (const auto precision : {models::Precision::Fp32, models::Precision::Bf16})
    for (const auto state : {dp::OptimizerState::Replicated, dp::OptimizerState::Sharded}) {
      BOOST_TEST_CONTEXT(enum_name(precision) << ", " << enum_name(state)) {
        Variant v;
        v.state = state;
        v.precision = precision;
        const std::string tag = std::string(enum_name(precision)) + "-" + std::string(enum_name(state));
        auto save = [&](const Variant& w, const std::string& name) {
          return test::losses_with_checkpoints(job(w), scratch.path / name);
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
  auto make = [&](models::OptimizerOffload offload, std::int64_t cap) {
    // cpu:8 and up: devices of their own, the caps stay on them
    auto c = test::wide_mlp_job(1, dp::OptimizerState::Replicated, models::Precision::Fp32, offload, 3, 8);
    c.data.eval_batches = 1;
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

// A sharded checkpoint gathers each bucket's optimizer state whole into host memory, outside the
// device's cap: a job capped a little above its own uncapped peak (room for the data loader's
// batches while the stage is built) saves checkpoints and resumes from them under that cap, to the
// uncapped job's losses. Gathered on the device, one bucket's state (here the whole stage's: one
// bucket) would not fit: what frees up between steps, with the margin, is less than one of its
// state tensors (checked below). (Starting under such a cap: the next test.)
BOOST_AUTO_TEST_CASE(a_sharded_checkpoint_saves_and_resumes_under_a_cap_the_steady_state_just_fits) {
  Scratch scratch;
  struct Uncap {
    ~Uncap() {
      for (int d = 8; d < 12; ++d) kernels::DeviceRuntime::get(kernels::Device::cpu(d)).set_memory_cap(0);
    }
  } uncap;
  constexpr std::int64_t kMargin = 64 << 10;
  for (const auto offload : {models::OptimizerOffload::None, models::OptimizerOffload::Host}) {
    BOOST_TEST_CONTEXT("offload " << enum_name(offload)) {
      const std::string tag(enum_name(offload));
      auto make = [&](std::int64_t cap) {
        // cpu:8 and up: devices of their own, the caps stay on them
        auto c = test::wide_mlp_job(2, dp::OptimizerState::Sharded, models::Precision::Fp32, offload, 4, 8);
        c.resources.device_memory = cap;
        return c;
      };
      // The uncapped job's peak on the fullest device, and what it held then.
      std::vector<double> uncapped;
      train::RankMemory fullest;
      {
        train::FitOptions fit;
        fit.progress = false;
        train::FitCallbacks callbacks;
        callbacks.on_step = [&](const train::StepEvent& e) {
          uncapped.push_back(e.outcome->loss);
          for (const auto& m : e.outcome->rank_memory)
            if (m.peak_bytes > fullest.peak_bytes) fullest = m;
        };
        train::run_job(make(0), fit, callbacks);
      }
      BOOST_REQUIRE_EQUAL(uncapped.size(), 4u);
      const std::int64_t cap = fullest.peak_bytes + kMargin;
      // Free between steps: the activations, messages and workspace of the peak, and the margin;
      // one Adam moment of the bucket is as large as its gradients.
      BOOST_TEST(fullest.activations + fullest.communication + fullest.workspace + kMargin < fullest.gradients);
      BOOST_TEST_MESSAGE(tag << ": cap " << cap << " bytes; gradients " << fullest.gradients << ", activations "
                             << fullest.activations);
      auto saved = make(cap);
      saved.checkpoints.dir = (scratch.path / tag).string();
      saved.checkpoints.every_steps = 2;
      saved.checkpoints.keep = 10;
      BOOST_TEST(test::step_losses(saved) == uncapped);
      auto resumed = make(cap);
      resumed.checkpoints.resume = (scratch.path / tag / train::checkpoint_folder_name(2)).string();
      BOOST_TEST(test::step_losses(resumed) == std::vector<double>(uncapped.begin() + 2, uncapped.end()));
    }
  }
}

// Built with its fp32 weights in host memory (offloaded under bf16, below), a stage starts from the
// seeded weights a stage built on the device starts from: the same fp32 masters and 16-bit copies,
// bit for bit, whole or sharded.
BOOST_AUTO_TEST_CASE(an_offloaded_stage_starts_from_the_same_weights) {
  for (const auto state : {dp::OptimizerState::Replicated, dp::OptimizerState::Sharded}) {
    BOOST_TEST_CONTEXT(enum_name(state)) {
      Variant v;
      v.precision = models::Precision::Bf16;
      v.state = state;
      // fp32 values by name: a weight's master where the optimizer keeps one (in host memory when
      // offloaded; a sharded one holds its own slice, put in place), else the value itself.
      auto initial = [](train::EmbeddedJob& job, int rank) {
        std::map<std::string, std::pair<std::vector<float>, std::vector<float>>> out;
        auto& executor = job.engine(rank).executor();
        for (int c = 0; c < job.plan().schedule.chunks; ++c)
          for (auto& [name, p] : executor.chunk(c).named_parameters()) {
            std::vector<float> fp32 = p->value.to_float_vector();
            if (const auto master = executor.optimizer().master_of(p)) {
              const auto slice = master->master.to_float_vector();
              std::copy(slice.begin(), slice.begin() + master->length, fp32.begin() + master->offset);
            }
            out[name] = {fp32, p->compute.defined() ? p->compute.to_float_vector() : std::vector<float>{}};
          }
        return out;
      };
      train::EmbeddedJob on_device(train::plan_job(job(v)));
      train::EmbeddedJob on_host(train::plan_job(job(offloaded(v))));
      for (int rank = 0; rank < on_device.world_size(); ++rank) {
        BOOST_TEST_CONTEXT("rank " << rank) {
          const auto device = initial(on_device, rank);
          const auto host = initial(on_host, rank);
          BOOST_TEST(!device.empty());
          for (const auto& [name, values] : device) {
            BOOST_TEST_CONTEXT(name) {
              BOOST_REQUIRE(host.count(name) == 1);
              const auto& [fp32, compute] = host.at(name);
              BOOST_TEST(fp32 == values.first);
              BOOST_TEST(compute == values.second);
            }
          }
        }
      }
    }
  }
}

// Offloaded under bf16 a stage is built with its fp32 weights in host memory (models::ParameterHome),
// so the device only ever holds what the steady state holds: the 16-bit weights, the fp32 gradients
// and the fp32 biases. (Built on the device first, the fp32 weights took 4 more bytes a weight
// during start-up than the 6 of the steady state, and a cap just above the training peak refused
// the job.) In fp32 the weights are the device's own and the state is made on the host: start-up
// needs no more than training either. So, with one replica, two, and two sharded: the peak while
// the job is built is not above its peak while it trains, and under a cap a little above the
// training peak the job starts and trains to the uncapped job's losses. The same holds for sharded
// state kept on the device under bf16 over 4 and 8 replicas, whose steady state (2 + 4 + 12/R: 9
// and 7.5 bytes a weight) is below the 10 that fp32 weights built on the device, their gradients and
// their 16-bit copies took while it started: its fp32 weights are built in host memory too, each
// replica copies its own segment of the masters onto the device, and a bucket's 16-bit copies go
// before its 16-bit weights and master segment are made (kept, they made 8.5 bytes at R = 8).
BOOST_AUTO_TEST_CASE(a_job_starts_under_a_cap_its_steady_state_just_fits) {
  constexpr int kFirstDevice = 8;   // devices of their own: the caps stay on them
  constexpr int kDevices = 16;
  // A job leaves its devices' caps set (/resources/device_memory 0 sets none): each job below starts
  // uncapped, and so do the tests after this one.
  auto uncap = [] {
    for (int d = kFirstDevice; d < kFirstDevice + kDevices; ++d)
      kernels::DeviceRuntime::get(kernels::Device::cpu(d)).set_memory_cap(0);
  };
  struct Uncap {
    std::function<void()> uncap;
    ~Uncap() { uncap(); }
  } uncap_at_the_end{uncap};
  auto allocator = [](int rank) -> kernels::CachingAllocator& {
    return kernels::DeviceRuntime::get(kernels::Device::cpu(kFirstDevice + rank)).allocator();
  };
  // Room for the data loader's batches, which run_job makes while the stages are built.
  constexpr std::int64_t kMargin = 64 << 10;
  struct Case {
    models::OptimizerOffload offload;
    models::Precision precision;
    dp::OptimizerState state;
    int replicas;
  };
  std::vector<Case> cases;
  for (const auto precision : {models::Precision::Bf16, models::Precision::Fp32})
    for (const auto state : {dp::OptimizerState::Replicated, dp::OptimizerState::Sharded})
      for (const int replicas : {1, 2})
        if (state == dp::OptimizerState::Replicated || replicas > 1)
          cases.push_back({models::OptimizerOffload::Host, precision, state, replicas});
  for (const int replicas : {4, 8})
    cases.push_back({models::OptimizerOffload::None, models::Precision::Bf16, dp::OptimizerState::Sharded, replicas});
  for (const auto& [offload, precision, state, replicas] : cases) {
    BOOST_TEST_CONTEXT(enum_name(offload) << ", " << enum_name(precision) << ", " << enum_name(state) << ", "
                                          << replicas << " replicas") {
      const int ranks = 2 * replicas;
      BOOST_REQUIRE_LE(ranks, kDevices);
      auto make = [&](std::int64_t cap) {
        auto c = test::wide_mlp_job(replicas, state, precision, offload, 3, kFirstDevice);
        c.resources.device_memory = cap;
        return c;
      };
      uncap();
      // Training's peak on each device (fit counts from the first step on).
      std::vector<double> uncapped;
      std::vector<std::int64_t> training(static_cast<std::size_t>(ranks), 0);
      {
        train::FitOptions fit;
        fit.progress = false;
        train::FitCallbacks callbacks;
        callbacks.on_step = [&](const train::StepEvent& e) {
          uncapped.push_back(e.outcome->loss);
          for (const auto& m : e.outcome->rank_memory) {
            auto& peak = training[static_cast<std::size_t>(m.rank)];
            peak = std::max(peak, m.peak_bytes);
          }
        };
        train::run_job(make(0), fit, callbacks);
      }
      BOOST_REQUIRE_EQUAL(uncapped.size(), 3u);
      // Start-up's peak: every rank's engine built, no step made.
      for (int r = 0; r < ranks; ++r) allocator(r).reset_peak();
      std::vector<std::int64_t> startup;
      {
        train::EmbeddedJob built(train::plan_job(make(0)));
        for (int r = 0; r < ranks; ++r) startup.push_back(allocator(r).stats().peak_in_use);
      }
      for (int r = 0; r < ranks; ++r)
        BOOST_TEST(startup[static_cast<std::size_t>(r)] <= training[static_cast<std::size_t>(r)], "rank " << r);
      const std::int64_t cap = *std::max_element(training.begin(), training.end()) + kMargin;
      BOOST_TEST_MESSAGE(enum_name(offload) << ", " << enum_name(precision) << ", " << enum_name(state) << ", " << replicas
                                              << " replicas: start-up peak "
                                              << *std::max_element(startup.begin(), startup.end())
                                              << " bytes, training peak " << cap - kMargin << ", cap " << cap);
      BOOST_TEST(test::step_losses(make(cap)) == uncapped);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
