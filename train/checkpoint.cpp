#include "train/checkpoint.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <cmath>
#include <fstream>

#include "core/clock.h"
#include "core/durable_file.h"
#include "core/error.h"
#include "core/log.h"
#include "train/job_config.h"

namespace pw::train {
namespace fs = std::filesystem;

void to_json(nlohmann::json& j, const CheckpointFile& f) {
  j = {{"name", f.name}, {"bytes", f.bytes}, {"checksum", f.checksum}};
  if (!f.tensors.empty()) j["tensors"] = f.tensors;
}

void from_json(const nlohmann::json& j, CheckpointFile& f) {
  f.name = j.at("name").get<std::string>();
  f.bytes = j.at("bytes").get<std::int64_t>();
  f.checksum = j.at("checksum").get<std::string>();
  f.tensors = j.value("tensors", std::vector<std::string>{});
}

std::string checkpoint_folder_name(std::int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "step-%07lld", static_cast<long long>(step));
  return name;
}

nlohmann::json to_json(const CheckpointManifest& m) {
  nlohmann::json j;
  j["format"] = kCheckpointFormat;
  j["step"] = m.step;
  j["model"] = m.model;
  j["lr"] = m.lr;
  j["skipped_steps"] = m.skipped_steps;
  j["rollbacks"] = m.rollbacks;
  j["data"] = {{"epoch", m.epoch}, {"batch_in_epoch", m.batch_in_epoch}};
  j["loss_history"] = m.loss_history;
  j["files"] = m.files;
  if (!m.ps_folder.empty()) j["parameter_servers"] = {{"folder", m.ps_folder}, {"files", m.ps_files}};
  j["config"] = m.config;
  return j;
}

CheckpointManifest read_manifest(const std::string& folder) {
  const auto path = (fs::path(folder) / kManifestName).string();
  std::ifstream in(path);
  PW_INPUT_CHECK(in.good(), "'" << folder << "' is not a checkpoint: it has no " << kManifestName
                                << " (an unfinished checkpoint, or another folder)");
  CheckpointManifest m;
  try {
    const auto j = nlohmann::json::parse(in);
    PW_INPUT_CHECK(j.value("format", 0) == kCheckpointFormat,
                   "'" << path << "' has checkpoint format " << j.value("format", 0) << "; this pipewright reads format "
                       << kCheckpointFormat);
    m.step = j.at("step").get<std::int64_t>();
    m.model = j.at("model").get<std::string>();
    m.lr = j.at("lr").get<double>();
    m.skipped_steps = j.value("skipped_steps", std::int64_t{0});
    m.rollbacks = j.value("rollbacks", std::int64_t{0});
    m.epoch = j.at("data").at("epoch").get<std::int64_t>();
    m.batch_in_epoch = j.at("data").at("batch_in_epoch").get<std::int64_t>();
    for (const auto& v : j.at("loss_history")) m.loss_history.push_back(v.is_number() ? v.get<double>() : std::nan(""));
    m.files = j.at("files").get<std::vector<CheckpointFile>>();
    if (j.contains("parameter_servers")) {
      m.ps_folder = j.at("parameter_servers").at("folder").get<std::string>();
      m.ps_files = j.at("parameter_servers").at("files").get<std::vector<CheckpointFile>>();
    }
    m.config = j.at("config");
  } catch (const nlohmann::json::exception& e) {
    throw InputError("'" + path + "' is not a valid checkpoint manifest: " + e.what());
  }
  PW_INPUT_CHECK(m.step >= 0 && static_cast<std::int64_t>(m.loss_history.size()) == m.step,
                 "'" << path << "' is not a valid checkpoint manifest: step " << m.step << " with "
                     << m.loss_history.size() << " losses");
  m.folder = folder;
  return m;
}

void write_manifest(const std::string& folder, const CheckpointManifest& m) {
  write_file_durably((fs::path(folder) / kManifestName).string(), to_json(m).dump(1) + "\n");
}

namespace {

// Checkpoint folders in `dir` by step, oldest first.
std::vector<std::pair<std::int64_t, fs::path>> checkpoint_folders(const std::string& dir) {
  std::vector<std::pair<std::int64_t, fs::path>> out;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(dir, error)) {
    const auto name = entry.path().filename().string();
    if (!entry.is_directory() || name.rfind("step-", 0) != 0) continue;
    try {
      std::size_t used = 0;
      const auto step = std::stoll(name.substr(5), &used);
      if (used == name.size() - 5) out.emplace_back(step, entry.path());
    } catch (const std::exception&) {
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool complete(const fs::path& folder) { return fs::exists(folder / kManifestName); }

}  // namespace

std::optional<std::string> newest_checkpoint(const std::string& dir) {
  const auto folders = checkpoint_folders(dir);
  for (auto it = folders.rbegin(); it != folders.rend(); ++it)
    if (complete(it->second)) return it->second.string();
  return std::nullopt;
}

std::string resolve_resume(const std::string& path) {
  const auto bad = [&](const std::string& problem) { return ConfigError("/checkpoints/resume", path + ": " + problem); };
  if (!fs::is_directory(path))
    throw bad("no such folder; give a checkpoint folder (D/step-N) or the /checkpoints/dir that holds them");
  if (complete(path)) return path;
  if (fs::path(path).filename().string().rfind("step-", 0) == 0)
    throw bad(std::string("this checkpoint is unfinished (no ") + kManifestName + "); give an older one or its folder");
  const auto newest = newest_checkpoint(path);
  if (!newest)
    throw bad(std::string("no complete checkpoint in this folder (expected step-N folders holding ") + kManifestName + ")");
  return *newest;
}

void prune_checkpoints(const std::string& dir, int keep) {
  const auto folders = checkpoint_folders(dir);
  int kept = 0;
  bool seen_complete = false;
  for (auto it = folders.rbegin(); it != folders.rend(); ++it) {
    const bool done = complete(it->second);
    bool remove = false;
    if (done) remove = ++kept > keep;
    else remove = seen_complete;   // unfinished and older than a complete one: never to be finished
    seen_complete = seen_complete || done;
    if (!remove) continue;
    std::error_code error;
    // The manifest goes first: a half-removed folder is then an unfinished one, never a damaged one.
    fs::remove(it->second / kManifestName, error);
    fs::remove_all(it->second, error);
    if (error) PW_LOG(Warn, "cannot remove old checkpoint " << it->second.string() << ": " << error.message());
  }
  sync_directory(dir);
}

void remove_checkpoints_after(const std::string& dir, std::int64_t step) {
  for (const auto& [s, folder] : checkpoint_folders(dir)) {
    if (s <= step) continue;
    std::error_code error;
    fs::remove(folder / kManifestName, error);
    fs::remove_all(folder, error);
    if (error) PW_LOG(Warn, "cannot remove checkpoint " << folder.string() << ": " << error.message());
  }
  sync_directory(dir);
}

void verify_file(const std::string& folder, const CheckpointFile& file) {
  const auto path = (fs::path(folder) / file.name).string();
  std::error_code error;
  const auto size = fs::file_size(path, error);
  PW_INPUT_CHECK(!error, "checkpoint file '" << path << "' is missing (" << error.message() << ")");
  PW_INPUT_CHECK(static_cast<std::int64_t>(size) == file.bytes, "checkpoint file '" << path << "' is damaged: "
                                                                   << size << " bytes, the manifest says " << file.bytes);
  const auto sum = file_checksum(path);
  PW_INPUT_CHECK(sum == file.checksum, "checkpoint file '" << path << "' is damaged: checksum " << sum
                                                             << ", the manifest says " << file.checksum);
}

CheckpointWriter::CheckpointWriter() : thread_([this] { run(); }) {}

CheckpointWriter::~CheckpointWriter() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

double CheckpointWriter::start(std::string folder, std::vector<CheckpointPart> parts, Then then) {
  const double waited = wait();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    folder_ = std::move(folder);
    parts_ = std::move(parts);
    then_ = std::move(then);
    busy_ = true;
  }
  changed_.notify_all();
  return waited;
}

double CheckpointWriter::wait() {
  const auto t0 = Clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return !busy_; });
  return seconds_since(t0);
}

std::vector<CheckpointPart> CheckpointWriter::take_buffers() {
  std::lock_guard<std::mutex> lock(mutex_);
  return busy_ ? std::vector<CheckpointPart>{} : std::move(written_parts_);
}

double CheckpointWriter::last_write_seconds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_write_seconds_;
}

void CheckpointWriter::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return busy_ || stopping_; });
    if (!busy_) return;   // stopping, nothing pending
    const std::string folder = folder_;
    auto parts = std::move(parts_);
    auto then = std::move(then_);
    lock.unlock();
    const auto t0 = Clock::now();
    Result result;
    try {
      if (!fs::exists(folder)) {
        fs::create_directories(folder);
        sync_directory(fs::path(folder).parent_path().string());
      }
      for (const auto& part : parts) {
        const auto written = kernels::save_safetensors((fs::path(folder) / part.name).string(), part.tensors, part.metadata);
        CheckpointFile f{part.name, written.bytes, written.checksum, {}};
        for (const auto& [name, t] : part.tensors) f.tensors.push_back(name);
        result.files.push_back(std::move(f));
      }
    } catch (const std::exception& e) {
      result.error = e.what();
    }
    try {
      if (then) then(result);
    } catch (const std::exception& e) {
      PW_LOG(Warn, "checkpoint: " << e.what());
    }
    lock.lock();
    written_parts_ = std::move(parts);
    last_write_seconds_ = seconds_since(t0);
    busy_ = false;
    changed_.notify_all();
  }
}

}  // namespace pw::train
