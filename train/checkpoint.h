#pragma once
// Writing, pruning and checking checkpoints; the layout and the manifest are in
// pipewright/checkpoint.h.
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
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

// Keeps the newest `keep` complete checkpoints in `dir`; removes older ones and unfinished ones
// older than the newest complete one. Logs what it cannot remove.
void prune_checkpoints(const std::string& dir, int keep);

// Removes the checkpoints in `dir` of steps after `step` (a rollback gives them up).
void remove_checkpoints_after(const std::string& dir, std::int64_t step);

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
