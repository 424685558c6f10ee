#pragma once
// When and how a running job checkpoints, on every rank: at every N steps, every S seconds (rank
// 0's clock decides, through the step's figures) and after the last step. At the step boundary
// each rank takes host copies of its part and hands them to a background writer; rank 0 also
// snapshots the parameter servers there (one consistent cut of dense and sparse state). When every
// rank reported its files (through the job's store), rank 0 writes the manifest and drops old
// checkpoints. A checkpoint that cannot be written stops the job (--on-checkpoint-error stop, the
// default) or is logged and skipped (continue); the previous one stays complete either way.
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "train/checkpoint.h"
#include "train/engine.h"

namespace pw::train {

// Bits of the figure rank 0 sends with every step.
enum PrimaryFlag : int { kCheckpointByTime = 1, kStopForCheckpointError = 2 };

// What a checkpoint records besides the tensors.
struct TrainingPosition {
  std::int64_t steps = 0;           // made so far
  std::int64_t epoch = 0, batch_in_epoch = 0;   // of the next step
  const std::vector<double>* loss_history = nullptr;
  std::int64_t skipped_steps = 0, rollbacks = 0;
};

class Checkpointer {
 public:
  Checkpointer(Engine& engine, std::int64_t total_steps);
  ~Checkpointer();   // waits for the write under way
  bool enabled() const { return !dir_.empty(); }

  // Rank 0's flags for the next step (a time-based checkpoint due, a failed one to stop for).
  double primary_flags() const;
  // Rank 0, before anything is read from or written to the checkpoint folder: takes its lock for
  // the job's whole run (CheckpointDirLock) and notes which step folders are another run's.
  void claim();
  // After a step, on every rank: whether to checkpoint now. Only after a good step (`good`: applied,
  // and no non-finite step since the last good one): a checkpoint due at a bad one waits for the next
  // good one, so a rollback's target always precedes the run of bad steps and nothing written while
  // steps are skipped pushes it out. Throws (every rank) when rank 0 said to stop for a failed
  // checkpoint.
  bool due(std::int64_t steps_made, const StepOutcome& outcome, bool good);
  // Rank 0, on a rollback to `step`: removes this job's checkpoints after it.
  void drop_after(std::int64_t step);
  // On every rank at the same boundary: hands this rank's part to the background writer.
  void save(const TrainingPosition& position);
  // Waits for the write under way (the end of the job, a rollback); rank 0 throws when the last
  // checkpoint failed and --on-checkpoint-error is stop.
  void finish();
  // The newest complete checkpoint, as rank 0 sees it, told to every rank (empty: none).
  std::string newest(rpc::Deadline deadline);
  // Rank 0, after every rank's finish(): what the checkpoints cost and where the last one is.
  nlohmann::json summary() const;

 private:
  // `error`: what already failed at the boundary (the servers' snapshot), empty if nothing.
  void collect_and_commit(std::int64_t sequence, std::string folder, CheckpointManifest manifest, std::string error,
                          const CheckpointWriter::Result& mine);
  void fail(const std::string& why);

  Engine& engine_;
  std::string dir_;
  std::int64_t every_steps_;
  double every_seconds_;
  int keep_;
  bool stop_on_error_;
  std::int64_t total_steps_;
  Clock::time_point last_time_;
  std::int64_t sequence_ = 0;   // checkpoints started by this job (the same count on every rank)
  std::int64_t queries_ = 0;
  std::int64_t finishes_ = 0;
  std::int64_t last_saved_step_ = -1;
  double blocked_seconds_ = 0.0;
  std::int64_t written_ = 0;
  mutable std::mutex mutex_;
  std::string failure_;          // rank 0: the last checkpoint's error, until reported
  std::int64_t failures_ = 0;
  std::string last_complete_;
  bool pending_ = false;         // a checkpoint was due at a bad step: the next good one writes it
  std::string run_;              // this job's run id, in its manifests
  CheckpointOwnership mine_;     // rank 0: what in dir_ this job may remove
  std::unique_ptr<CheckpointDirLock> lock_;    // rank 0; released after the writer stopped
  std::unique_ptr<CheckpointWriter> writer_;   // last member: its thread stops first
};

}  // namespace pw::train
