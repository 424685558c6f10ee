#pragma once
// Writing, pruning and checking checkpoints; the layout and the manifest are in
// pipewright/checkpoint.h.
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/safetensors.h"
#include "pipewright/checkpoint.h"

namespace pw::train {

// The manifest and reading it: pipewright/checkpoint.h.

// Writes FOLDER/manifest.json durably (the checkpoint's last file).
void write_manifest(const std::string& folder, const CheckpointManifest& m);

// What of a checkpoint folder belongs to the running job: the step folders made after it took the
// folder's lock (no other job can have made them since) and those whose manifest names its run (an
// earlier attempt of the same launch). Everything else is another run's and is never removed.
struct CheckpointOwnership {
  std::string run;                    // this job's run id, written into its manifests
  std::set<std::string> present_before;   // step folder names in the folder when the lock was taken
  bool owns(const std::string& folder) const;
};

// Keeps the newest `keep` complete checkpoints of this job in `dir`; removes its older ones and its
// unfinished ones older than its newest complete one. Another run's folders are left alone. Logs what
// it cannot remove.
void prune_checkpoints(const std::string& dir, int keep, const CheckpointOwnership& mine);

// Removes this job's checkpoints in `dir` of steps after `step` (a rollback gives them up).
void remove_checkpoints_after(const std::string& dir, std::int64_t step, const CheckpointOwnership& mine);

// The step folders in `dir` now (names), for CheckpointOwnership::present_before.
std::set<std::string> checkpoint_folder_names(const std::string& dir);

// The lock a job holds on its checkpoint folder for its whole run, as PostgreSQL's postmaster.pid:
// DIR/pipewright.lock, flock'ed, holding the holder's host, pid, start time and run. While one job
// holds it another gets an InputError naming the holder's host and pid. A lock file whose flock is
// free was left by a process that ended without removing it (killed): on the same host it is taken
// over with a log line; one naming another host is refused (its flock may not reach this host), with
// what to remove if that job is gone. The destructor removes the file and releases the lock.
inline constexpr const char* kLockName = "pipewright.lock";

struct LockHolder {
  std::string host;
  long long pid = 0;
  std::string started;   // UTC, ISO 8601
  std::string run;
};

class CheckpointDirLock {
 public:
  CheckpointDirLock(const std::string& dir, const std::string& run);
  ~CheckpointDirLock();
  CheckpointDirLock(const CheckpointDirLock&) = delete;
  CheckpointDirLock& operator=(const CheckpointDirLock&) = delete;
  const std::string& path() const { return path_; }
  // The previous holder when a stale lock was taken over (nullopt: the lock was free).
  const std::optional<LockHolder>& taken_over() const { return taken_over_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::optional<LockHolder> taken_over_;
};

std::string this_host_name();

// Checks that FOLDER/file has the size and checksum the manifest recorded; InputError naming the
// file otherwise ("damaged").
void verify_file(const std::string& folder, const CheckpointFile& file);

// One rank's tensors of one checkpoint file, copied to the host at the step boundary.
struct CheckpointPart {
  std::string name;   // file name in the checkpoint folder
  kernels::NamedTensors tensors;
  std::map<std::string, std::string> metadata;
};

// Writes a rank's parts in a background thread while training goes on (DCP's async_save): start()
// waits for the previous checkpoint's write to finish, then hands over host copies; `then` runs on
// the writer thread afterwards with the files written or the error.
class CheckpointWriter {
 public:
  struct Result {
    std::vector<CheckpointFile> files;
    std::string error;   // empty: written
  };
  using Then = std::function<void(const Result&)>;

  CheckpointWriter();
  ~CheckpointWriter();   // finishes the write under way
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Returns the seconds it waited for the previous write.
  double start(std::string folder, std::vector<CheckpointPart> parts, Then then);
  // Blocks until nothing is being written; returns the seconds waited.
  double wait();
  // After wait(): the host copies of the last checkpoint, for the next one to copy into (reusing
  // memory already touched keeps the step boundary short, as DCP's cached staging buffers do).
  std::vector<CheckpointPart> take_buffers();
  double last_write_seconds() const;

 private:
  void run();

  mutable std::mutex mutex_;
  std::condition_variable changed_;
  bool busy_ = false, stopping_ = false;
  std::string folder_;
  std::vector<CheckpointPart> parts_;
  std::vector<CheckpointPart> written_parts_;
  Then then_;
  double last_write_seconds_ = 0.0;
  std::thread thread_;
};

}  // namespace pw::train
