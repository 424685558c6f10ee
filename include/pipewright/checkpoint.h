#pragma once
// Checkpoints of a whole job, as torch.distributed.checkpoint lays them out: one folder per step,
// D/step-NNNNNNN/, in which every rank of replica 0 writes its own stage's tensors (parameters,
// buffers and optimizer state, by whole-model name) and rank 0 writes manifest.json last: the job
// config, the step, the loss history, the learning rate in force, the data position, and every
// file with its size, checksum and the tensors it holds. A folder without a manifest is an
// unfinished checkpoint and is ignored. Because tensors are found by name through the manifest,
// a checkpoint resumes under another stage count, split or replica count.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

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
  std::string run;                   // the run that wrote it (empty: unknown, an older pipewright)
  std::string folder;                // where it was read from (not written)
};

std::string checkpoint_folder_name(std::int64_t step);   // "step-0000012"
nlohmann::json to_json(const CheckpointManifest& m);
// Reads FOLDER/manifest.json; InputError naming the file when it is missing or malformed, and naming
// the manifest and the entry when a file name is not a plain name inside FOLDER: `..`, an absolute
// path, a separator (parameter-server files: only below their folder), a duplicate, or a symbolic
// link that leads out of FOLDER.
CheckpointManifest read_manifest(const std::string& folder);
// The newest folder in `dir` holding a readable manifest (nullopt: none).
std::optional<std::string> newest_checkpoint(const std::string& dir);
// `path` as /checkpoints/resume names it: a checkpoint folder (with a manifest) or a folder of them
// (its newest complete one). ConfigError at /checkpoints/resume saying what was found otherwise.
std::string resolve_resume(const std::string& path);
}  // namespace pw::train
