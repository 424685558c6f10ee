#include "train/checkpointer.h"

#include <cstdio>
#include <filesystem>

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/durable_file.h"
#include "core/error.h"
#include "core/log.h"
#include "rpc/job_token.h"
#include "train/parameter_servers.h"
#include "train/fault_injection.h"

namespace pw::train {
namespace fs = std::filesystem;

namespace {

// Which run wrote a checkpoint. The attempts of one launch (launch --max-restarts) share their job
// token and so one run; a job started without a launcher is a run of its own. The token is a
// secret: only a checksum of it is written.
std::string job_run_id() {
  std::optional<std::string> token;
  try {
    token = rpc::job_token_from_env();
  } catch (const std::exception&) {
  }
  if (token) return "launch-" + checksum_hex(checksum64(token->data(), token->size()));
  const auto self = this_host_name() + "/" + std::to_string(::getpid()) + "/" +
                    std::to_string(std::chrono::system_clock::now().time_since_epoch().count()) + "/" +
                    std::to_string(reinterpret_cast<std::uintptr_t>(&token));
  return "run-" + checksum_hex(checksum64(self.data(), self.size()));
}

}  // namespace

Checkpointer::Checkpointer(Engine& engine, std::int64_t total_steps)
    : engine_(engine),
      dir_(engine.plan().config.checkpoints.dir),
      every_steps_(engine.plan().config.checkpoints.every_steps),
      every_seconds_(engine.plan().config.checkpoints.every_seconds),
      keep_(engine.plan().config.checkpoints.keep),
      stop_on_error_(engine.plan().config.checkpoints.on_error != CheckpointErrorPolicy::Continue),
      total_steps_(total_steps),
      last_time_(Clock::now()),
      run_(job_run_id()) {
  if (enabled()) writer_ = std::make_unique<CheckpointWriter>();
}

void Checkpointer::claim() {
  if (!enabled() || !engine_.is_primary() || lock_) return;
  lock_ = std::make_unique<CheckpointDirLock>(dir_, run_);
  mine_.run = run_;
  mine_.present_before = checkpoint_folder_names(dir_);
}

void Checkpointer::drop_after(std::int64_t step) {
  if (enabled() && engine_.is_primary()) remove_checkpoints_after(dir_, step, mine_);
}

Checkpointer::~Checkpointer() = default;

double Checkpointer::primary_flags() const {
  if (!enabled() || !engine_.is_primary()) return 0.0;
  int flags = 0;
  if (every_seconds_ > 0 && seconds_since(last_time_) >= every_seconds_) flags |= kCheckpointByTime;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!failure_.empty() && stop_on_error_) flags |= kStopForCheckpointError;
  return flags;
}

bool Checkpointer::due(std::int64_t steps_made, const StepOutcome& outcome, bool good) {
  const int flags = static_cast<int>(outcome.primary_flags);
  if (flags & kStopForCheckpointError) {
    if (engine_.is_primary()) {
      std::lock_guard<std::mutex> lock(mutex_);
      throw InputError(failure_ + " (the job stops: /checkpoints/on_error stop)");
    }
    throw rpc::AbortedError("rank " + std::to_string(engine_.rank()) + ": rank 0 stopped the job after step " +
                            std::to_string(steps_made) + " because a checkpoint could not be written");
  }
  if (!enabled()) return false;
  const bool wanted = pending_ || (every_steps_ > 0 && steps_made % every_steps_ == 0) || (flags & kCheckpointByTime) ||
                      steps_made == total_steps_;
  if (!wanted) return false;
  pending_ = !good;
  return good;
}

void Checkpointer::fail(const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  failure_ = why;
  ++failures_;
  log::outputf("checkpoint failed: %s%s", why.c_str(),
               stop_on_error_ ? "" : " (continuing: the checkpoint error policy is continue)");
}

void Checkpointer::save(const TrainingPosition& position) {
  if (position.steps == last_saved_step_) return;
  const auto t0 = Clock::now();
  const std::int64_t sequence = sequence_++;
  last_saved_step_ = position.steps;
  const std::string folder = (fs::path(dir_) / checkpoint_folder_name(position.steps)).string();
  const auto& plan = engine_.plan();
  CheckpointManifest manifest;
  std::string snapshot_error;   // the servers' snapshot, taken here at the boundary
  if (engine_.is_primary()) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!stop_on_error_) failure_.clear();   // reported once; the next checkpoint may succeed
    }
    manifest.step = position.steps;
    manifest.config = to_json(plan.config);
    manifest.model = plan.model.name;
    manifest.loss_history = *position.loss_history;
    manifest.lr = engine_.lr();
    manifest.skipped_steps = position.skipped_steps;
    manifest.rollbacks = position.rollbacks;
    manifest.epoch = position.epoch;
    manifest.batch_in_epoch = position.batch_in_epoch;
    manifest.run = run_;
    if (engine_.parameter_servers()) {
      // At the boundary, before any rank starts the next step: the servers hold exactly the
      // pushes of the steps made.
      try {
        make_own_folder(folder, "checkpoint folder");
        manifest.ps_folder = "ps";
        for (const auto& f : engine_.parameter_servers()->checkpoint((fs::path(folder) / "ps").string(), position.steps))
          manifest.ps_files.push_back(CheckpointFile{"ps/" + f.path, f.bytes, f.checksum, {}});
      } catch (const std::exception& e) {
        snapshot_error = std::string("rank 0: parameter-server snapshot: ") + e.what();
      }
    }
  }
  writer_->wait();   // the previous checkpoint's write (its buffers are reused)
  auto parts = engine_.checkpoint_parts(writer_->take_buffers());
  const bool primary = engine_.is_primary();
  const int rank = engine_.rank();
  const std::int64_t step = position.steps;
  writer_->start(folder, std::move(parts),
                                     [this, sequence, folder, manifest, snapshot_error, primary, rank,
                                      step](const CheckpointWriter::Result& written) {
                                       CheckpointWriter::Result r = written;
                                       if (r.error.empty() && !r.files.empty() &&
                                           injected_fault(FaultKind::DiskFull, step, rank)) {
                                         // A test's full disk: the last file fails as a write() with
                                         // ENOSPC does (write_file_durably's error; nothing left).
                                         const auto path = (fs::path(folder) / r.files.back().name).string();
                                         std::error_code ignored;
                                         fs::remove(path, ignored);
                                         r.files.pop_back();
                                         r.error = "cannot write '" + path + "': " + std::strerror(ENOSPC);
                                       }
                                       if (primary) {
                                         collect_and_commit(sequence, folder, manifest, snapshot_error, r);
                                         return;
                                       }
                                       nlohmann::json report = {{"files", r.files}, {"error", r.error}};
                                       engine_.links().store().set(
                                           "ckpt/" + std::to_string(sequence) + "/" + std::to_string(rank), report.dump());
                                     });
  blocked_seconds_ += seconds_since(t0);
  last_time_ = Clock::now();
}

void Checkpointer::collect_and_commit(std::int64_t sequence, std::string folder, CheckpointManifest manifest,
                                      std::string error, const CheckpointWriter::Result& mine) {
  if (error.empty() && !mine.error.empty()) error = "rank 0: " + mine.error;
  manifest.files = mine.files;
  const auto& config = engine_.plan().config;
  // Other ranks may write more or slower than rank 0; a failed job ends this wait at once (get()
  // follows the job's cancellation).
  const auto deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<std::int64_t>(std::max(600.0, config.timeouts.stage_seconds) * 1000));
  for (int r = 1; r < engine_.links().world_size(); ++r) {
    try {
      const auto report = nlohmann::json::parse(engine_.links().get("ckpt/" + std::to_string(sequence) + "/" + std::to_string(r), deadline));
      const auto why = report.at("error").get<std::string>();
      if (!why.empty() && error.empty()) error = "rank " + std::to_string(r) + ": " + why;
      for (auto& f : report.at("files").get<std::vector<CheckpointFile>>()) manifest.files.push_back(std::move(f));
    } catch (const std::exception& e) {
      if (error.empty()) error = "rank " + std::to_string(r) + " did not report its part: " + e.what();
    }
  }
  if (error.empty()) {
    try {
      write_manifest(folder, manifest);
    } catch (const std::exception& e) {
      error = std::string("rank 0: ") + e.what();
    }
  }
  if (!error.empty()) {
    // An unfinished checkpoint; the previous one stands. Only what this job wrote goes: the whole
    // folder when the job made it, else the files its ranks reported.
    std::error_code ignored;
    if (mine_.owns(folder)) {
      fs::remove_all(folder, ignored);
    } else {
      for (const auto* list : {&manifest.files, &manifest.ps_files})
        for (const auto& f : *list) fs::remove(fs::path(folder) / f.name, ignored);
    }
    fail("checkpoint " + folder + " was not written: " + error);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++written_;
    last_complete_ = folder;
  }
  prune_checkpoints(dir_, keep_, mine_);
}

void Checkpointer::finish() {
  if (!enabled()) return;
  writer_->wait();
  // For rank 0's summary: the job is blocked as long as its slowest rank.
  engine_.links().store().set("ckpt/blocked/" + std::to_string(engine_.rank()) + "/" + std::to_string(finishes_++),
                              std::to_string(blocked_seconds_));
  if (!engine_.is_primary()) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (!failure_.empty() && stop_on_error_) throw InputError(failure_ + " (the job stops: /checkpoints/on_error stop)");
}

std::string Checkpointer::newest(rpc::Deadline deadline) {
  const std::string key = "ckpt/newest/" + std::to_string(queries_++);
  if (!engine_.is_primary()) return engine_.links().get(key, deadline);
  std::string folder;
  if (enabled()) folder = newest_checkpoint(dir_).value_or("");
  engine_.links().store().set(key, folder);
  return folder;
}

nlohmann::json Checkpointer::summary() const {
  // Every rank's blocked time, as each published it at its last finish().
  double slowest = blocked_seconds_;
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  for (int r = 1; r < engine_.links().world_size(); ++r)
    slowest = std::max(slowest, std::stod(engine_.links().get(
                                    "ckpt/blocked/" + std::to_string(r) + "/" + std::to_string(finishes_ - 1), deadline)));
  std::lock_guard<std::mutex> lock(mutex_);
  return {{"dir", dir_},
          {"written", written_},
          {"failures", failures_},
          {"blocked_seconds", slowest},   // the slowest rank's total
          {"last_write_seconds", writer_ ? writer_->last_write_seconds() : 0.0},
          {"last", last_complete_}};
}

}  // namespace pw::train
