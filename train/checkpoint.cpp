#include "train/checkpoint.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <thread>

#include "core/clock.h"
#include "core/durable_file.h"
#include "core/error.h"
#include "core/json_text.h"
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
  if (!m.run.empty()) j["run"] = m.run;
  return j;
}

namespace {

// Why `name` is not one plain component of a path (empty: it is).
std::string component_problem(const std::string& name) {
  if (name.empty()) return "has an empty part";
  if (name == "..") return "climbs out of its folder with '..'";
  if (name == ".") return "has a '.' part";
  if (name.find('\\') != std::string::npos) return "holds a backslash";
  if (name.find('\0') != std::string::npos) return "holds a NUL byte";
  return "";
}

// Why a manifest's file name is not a plain name inside the checkpoint folder (empty: it is). Files
// of the parameter servers lie below their own folder (`under`, one plain name); the others are
// plain names.
std::string name_problem(const std::string& name, const std::string& under) {
  if (name.empty()) return "is empty";
  if (name.front() == '/') return "is an absolute path";
  std::vector<std::string> parts;
  for (std::size_t at = 0;;) {
    const auto slash = name.find('/', at);
    parts.push_back(name.substr(at, slash == std::string::npos ? std::string::npos : slash - at));
    if (slash == std::string::npos) break;
    at = slash + 1;
  }
  for (const auto& part : parts)
    if (const auto why = component_problem(part); !why.empty()) return why;
  if (under.empty()) return parts.size() == 1 ? "" : "holds a path separator (a checkpoint's files are plain names in it)";
  if (parts.size() < 2 || parts.front() != under) return "is not inside the parameter-server folder '" + under + "'";
  return "";
}

// Whether `path` (which exists) resolves, through any symbolic link, to a place inside `folder`.
bool resolves_inside(const fs::path& folder, const fs::path& path) {
  std::error_code error;
  const auto base = fs::canonical(folder, error);
  if (error) return false;
  const auto target = fs::weakly_canonical(path, error);
  if (error) return false;
  const auto rel = target.lexically_relative(base);
  return !rel.empty() && *rel.begin() != ".." && rel != ".";
}

// Refuses, in one line naming the manifest and the entry, file names that are not plain names inside
// `folder`, duplicates, and symbolic links leading out of it.
void check_file_names(const std::string& folder, const std::string& path, const CheckpointManifest& m) {
  const auto bad = [&](const std::string& name, const std::string& why) {
    return InputError("'" + path + "': file entry '" + name + "' " + why +
                      "; a checkpoint names only files inside its own folder");
  };
  if (!m.ps_folder.empty()) {
    if (const auto why = name_problem(m.ps_folder, ""); !why.empty())
      throw InputError("'" + path + "': parameter-server folder '" + m.ps_folder + "' " + why +
                       "; a checkpoint names only files inside its own folder");
  }
  std::set<std::string> seen;
  const auto check = [&](const CheckpointFile& f, const std::string& under) {
    if (const auto why = name_problem(f.name, under); !why.empty()) throw bad(f.name, why);
    if (!seen.insert(f.name).second) throw bad(f.name, "is listed twice");
    const auto file = fs::path(folder) / f.name;
    std::error_code error;
    if (fs::symlink_status(file, error).type() != fs::file_type::not_found && !error && !resolves_inside(folder, file))
      throw bad(f.name, "is a symbolic link (or lies below one) leading out of " + folder);
  };
  for (const auto& f : m.files) check(f, "");
  for (const auto& f : m.ps_files) check(f, m.ps_folder);
}

}  // namespace

CheckpointManifest read_manifest(const std::string& folder) {
  const auto path = (fs::path(folder) / kManifestName).string();
  std::error_code missing;
  PW_INPUT_CHECK(fs::symlink_status(path, missing).type() != fs::file_type::not_found,
                 "'" << folder << "' is not a checkpoint: it has no " << kManifestName
                     << " (an unfinished checkpoint, or another folder)");
  const std::string invalid = "'" + path + "' is not a valid checkpoint manifest";
  // A plain file (not a FIFO or a folder), depth-checked before parsing (core/json_text.h); 1 GiB
  // holds the loss history of tens of millions of steps.
  const auto j = read_json_file(path, "checkpoint manifest", std::int64_t{1} << 30);
  // Each number where it is, named by its JSON path: a whole number in int64 (a fraction, a text or
  // a number past 2^63 - 1 is refused, not converted).
  const auto bad = [&](const std::string& field, const std::string& problem) {
    return InputError(invalid + ": " + field + " " + problem);
  };
  const auto whole = [&](const nlohmann::json& v, const std::string& field, std::int64_t low) {
    if (!v.is_number_integer() ||
        (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())))
      throw bad(field, "is not a whole number of at most 2^63 - 1");
    const auto n = v.get<std::int64_t>();
    if (n < low) throw bad(field, std::to_string(n) + "; expected " + std::to_string(low) + " or more");
    return n;
  };
  CheckpointManifest m;
  try {
    PW_INPUT_CHECK(j.is_object(), invalid << ": expected a JSON object");
    PW_INPUT_CHECK(j.value("format", 0) == kCheckpointFormat,
                   "'" << path << "' has checkpoint format " << j.value("format", 0) << "; this pipewright reads format "
                       << kCheckpointFormat);
    m.step = whole(j.at("step"), "/step", 0);
    m.model = j.at("model").get<std::string>();
    // Above 0 in every manifest a job writes; 0 (CheckpointManifest's default, "not set") is left
    // to the resume, which refuses it (train/fit.cpp).
    const auto& lr = j.at("lr");
    if (!lr.is_number() || !(lr.get<double>() >= 0) || !std::isfinite(lr.get<double>()))
      throw bad("/lr", (lr.is_number() ? (std::ostringstream() << lr.get<double>()).str() : std::string("is not a number")) +
                           "; expected a finite number above 0");
    m.lr = lr.get<double>();
    m.skipped_steps = j.contains("skipped_steps") ? whole(j.at("skipped_steps"), "/skipped_steps", 0) : 0;
    if (m.skipped_steps > m.step)
      throw bad("/skipped_steps", std::to_string(m.skipped_steps) + "; expected at most the step, " + std::to_string(m.step));
    m.rollbacks = j.contains("rollbacks") ? whole(j.at("rollbacks"), "/rollbacks", 0) : 0;
    m.epoch = whole(j.at("data").at("epoch"), "/data/epoch", 0);
    m.batch_in_epoch = whole(j.at("data").at("batch_in_epoch"), "/data/batch_in_epoch", 0);
    for (const auto& v : j.at("loss_history")) m.loss_history.push_back(v.is_number() ? v.get<double>() : std::nan(""));
    m.files = j.at("files").get<std::vector<CheckpointFile>>();
    if (j.contains("parameter_servers")) {
      m.ps_folder = j.at("parameter_servers").at("folder").get<std::string>();
      m.ps_files = j.at("parameter_servers").at("files").get<std::vector<CheckpointFile>>();
    }
    for (const auto* files : {&m.files, &m.ps_files})
      for (const auto& f : *files)
        if (f.bytes < 0) throw bad("/files", "entry " + f.name + " has bytes " + std::to_string(f.bytes) + "; expected 0 or more");
    m.config = j.at("config");
    m.run = j.value("run", std::string());
  } catch (const nlohmann::json::exception& e) {
    throw InputError(invalid + ": " + e.what());
  }
  PW_INPUT_CHECK(static_cast<std::int64_t>(m.loss_history.size()) == m.step,
                 invalid << ": step " << m.step << " with " << m.loss_history.size() << " losses");
  check_file_names(folder, path, m);
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

std::set<std::string> checkpoint_folder_names(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& [step, folder] : checkpoint_folders(dir)) out.insert(folder.filename().string());
  return out;
}

bool CheckpointOwnership::owns(const std::string& folder) const {
  if (!present_before.count(fs::path(folder).filename().string())) return true;   // made since the lock
  if (run.empty() || !complete(folder)) return false;
  try {
    const auto j = read_json_file((fs::path(folder) / kManifestName).string(), "checkpoint manifest", std::int64_t{1} << 30);
    return j.is_object() && j.value("run", std::string()) == run;
  } catch (const std::exception&) {
    return false;
  }
}

namespace {

void remove_checkpoint_folder(const fs::path& folder, const char* what) {
  std::error_code error;
  // The manifest goes first: a half-removed folder is then an unfinished one, never a damaged one.
  fs::remove(folder / kManifestName, error);
  fs::remove_all(folder, error);
  if (error) PW_LOG(Warn, "cannot remove " << what << " " << folder.string() << ": " << error.message());
}

}  // namespace

void prune_checkpoints(const std::string& dir, int keep, const CheckpointOwnership& mine) {
  const auto folders = checkpoint_folders(dir);
  int kept = 0;
  bool seen_complete = false;
  for (auto it = folders.rbegin(); it != folders.rend(); ++it) {
    if (!mine.owns(it->second.string())) continue;   // another run's: never ours to remove
    const bool done = complete(it->second);
    bool remove = false;
    if (done) remove = ++kept > keep;
    else remove = seen_complete;   // unfinished and older than a complete one: never to be finished
    seen_complete = seen_complete || done;
    if (remove) remove_checkpoint_folder(it->second, "old checkpoint");
  }
  sync_directory(dir);
}

void remove_checkpoints_after(const std::string& dir, std::int64_t step, const CheckpointOwnership& mine) {
  for (const auto& [s, folder] : checkpoint_folders(dir))
    if (s > step && mine.owns(folder.string())) remove_checkpoint_folder(folder, "checkpoint");
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

std::string this_host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown-host";
  return name;
}

namespace {

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

std::string read_fd(int fd) {
  std::string text;
  char buf[1024];
  for (off_t at = 0;;) {
    const auto n = ::pread(fd, buf, sizeof buf, at);
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
    at += n;
  }
  return text;
}

std::optional<LockHolder> parse_holder(const std::string& text) {
  try {
    const auto j = parse_json_text(text, "lock file");
    LockHolder h;
    h.host = j.at("host").get<std::string>();
    h.pid = j.at("pid").get<long long>();
    h.started = j.value("started", std::string());
    h.run = j.value("run", std::string());
    return h;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

bool process_alive(long long pid) { return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM); }

std::string describe(const LockHolder& h) {
  return "host " + h.host + ", pid " + std::to_string(h.pid) + (h.started.empty() ? "" : ", started " + h.started);
}

}  // namespace

CheckpointDirLock::CheckpointDirLock(const std::string& dir, const std::string& run)
    : path_((fs::path(dir) / kLockName).string()) {
  const auto host = this_host_name();
  const auto in_use = [&](const std::string& problem) { return ConfigError("/checkpoints/dir", dir + problem); };
  for (;;) {
    // Never through a link (a planted one would have the lock's JSON written into its target).
    refuse_unless_plain_file(path_, "lock file");
    const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
      if (errno == ELOOP) refuse_unless_plain_file(path_, "lock file");   // planted since the check
      throw in_use(": cannot open its lock file " + path_ + " (" + std::strerror(errno) + ")");
    }
    if (struct stat opened {}; ::fstat(fd, &opened) != 0 || !S_ISREG(opened.st_mode) || opened.st_nlink > 1) {
      ::close(fd);
      refuse_unless_plain_file(path_, "lock file");
      throw in_use(": its lock file " + path_ + " is " +
                   (S_ISREG(opened.st_mode) ? "hard-linked to another file" : "not a plain file") +
                   "; pipewright writes only files it made: remove it");
    }
    bool locked = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
    const int lock_errno = locked ? 0 : errno;
    if (!locked && lock_errno == EWOULDBLOCK) {
      // Held. Its holder writes its name just after taking the lock: read until a live one shows.
      std::optional<LockHolder> holder;
      for (int attempt = 0; attempt < 100; ++attempt) {
        holder = parse_holder(read_fd(fd));
        if (holder && (holder->host != host || process_alive(holder->pid))) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      ::close(fd);
      throw in_use(" is in use by another job (" + (holder ? describe(*holder) : std::string("its lock file names no holder yet")) +
                   "; lock " + path_ + "); give each job its own /checkpoints/dir");
    }
    const auto previous = parse_holder(read_fd(fd));
    if (!locked) {
      // No flock on this file system: the pid in the file is all there is (PostgreSQL's rule).
      PW_LOG(Warn, "cannot flock " << path_ << " (" << std::strerror(lock_errno) << "); relying on the pid it names");
      if (previous && previous->host == host && previous->pid != ::getpid() && process_alive(previous->pid)) {
        ::close(fd);
        throw in_use(" is in use by another job (" + describe(*previous) + "; lock " + path_ +
                     "); give each job its own /checkpoints/dir");
      }
    } else {
      // Another job may have removed the file between our open and flock (its release): lock the new one.
      struct stat mine {}, now {};
      if (::fstat(fd, &mine) != 0 || ::stat(path_.c_str(), &now) != 0 || mine.st_ino != now.st_ino ||
          mine.st_dev != now.st_dev) {
        ::close(fd);
        continue;
      }
    }
    if (previous && previous->host != host) {
      ::close(fd);
      throw in_use(" holds the lock of a job on another host (" + describe(*previous) + "; lock " + path_ +
                   ") that this host cannot check; if that job has ended, remove " + path_);
    }
    if (previous) {
      taken_over_ = previous;
      log::outputf("checkpoint folder %s: taking over the lock left by pid %lld on this host%s%s (%s)", dir.c_str(),
                   previous->pid, previous->started.empty() ? "" : ", started ", previous->started.c_str(),
                   process_alive(previous->pid) ? "it no longer holds it" : "no longer running");
    }
    const nlohmann::json me = {{"host", host}, {"pid", static_cast<long long>(::getpid())}, {"started", utc_now()}, {"run", run}};
    const auto text = me.dump() + "\n";
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      throw in_use(": cannot write its lock file " + path_ + " (" + why + ")");
    }
    fd_ = fd;
    return;
  }
}

CheckpointDirLock::~CheckpointDirLock() {
  if (fd_ < 0) return;
  // Removed while still held, so a job that opened it meanwhile sees it went and locks a new one.
  struct stat mine {}, now {};
  if (::fstat(fd_, &mine) == 0 && ::stat(path_.c_str(), &now) == 0 && mine.st_ino == now.st_ino && mine.st_dev == now.st_dev)
    ::unlink(path_.c_str());
  ::close(fd_);
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
      if (make_own_folder(folder, "checkpoint folder")) sync_directory(fs::path(folder).parent_path().string());
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
