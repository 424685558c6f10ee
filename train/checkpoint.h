#pragma once
// Checkpoints of a whole job, as torch.distributed.checkpoint lays them out: one folder per step,
// D/step-NNNNNNN/, in which every rank of replica 0 writes its own stage's tensors (parameters,
// buffers and optimizer state, by whole-model name) and rank 0 writes manifest.json last: the job
// config, the step, the loss history, the learning rate in force, the data position, and every
// file with its size, checksum and the tensors it holds. A folder without a manifest is an
// unfinished checkpoint and is ignored. Because tensors are found by name through the manifest,
// a checkpoint resumes under another stage count, split or replica count.
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

namespace pw::train {

inline constexpr const char* kManifestName = "manifest.json";
inline constexpr int kCheckpointFormat = 1;

struct CheckpointFile {
  std::string name;   // relative to the checkpoint folder
  std::int64_t bytes = 0;
  std::string checksum;
  std::vector<std::string> tensors;   // safetensors files: the names inside
};

void to_json(nlohmann::json& j, const CheckpointFile& f);
void from_json(const nlohmann::json& j, CheckpointFile& f);

struct CheckpointManifest {
  std::int64_t step = 0;             // steps made; a resumed job makes step `step` + 1 next (1-based)
  nlohmann::json config;             // the job's identity when it was saved
  std::string model;
  std::vector<double> loss_history;  // of steps 1..step (null where a step was skipped)
  double lr = 0.0;                   // the learning rate in force (after any rollback)
  std::int64_t skipped_steps = 0;
  std::int64_t rollbacks = 0;
  std::int64_t epoch = 0, batch_in_epoch = 0;   // the data position of the next step
  std::vector<CheckpointFile> files;
  std::string ps_folder;             // parameter-server shards' snapshot (relative); empty: none
  std::vector<CheckpointFile> ps_files;
  std::string folder;                // where it was read from (not written)
};

std::string checkpoint_folder_name(std::int64_t step);   // "step-0000012"
nlohmann::json to_json(const CheckpointManifest& m);
// Reads FOLDER/manifest.json; InputError naming the file when it is missing or malformed.
CheckpointManifest read_manifest(const std::string& folder);
// Writes FOLDER/manifest.json durably (the checkpoint's last file).
void write_manifest(const std::string& folder, const CheckpointManifest& m);

// The newest folder in `dir` holding a readable manifest (nullopt: none).
std::optional<std::string> newest_checkpoint(const std::string& dir);
// `path` as --resume names it: a checkpoint folder (with a manifest) or a folder of them (its newest
// complete one). InputError saying what was found otherwise.
std::string resolve_resume(const std::string& path);
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
