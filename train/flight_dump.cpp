#include "train/flight_dump.h"

#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <stop_token>
#include <thread>

#include "core/durable_file.h"
#include "core/error.h"
#include "core/log.h"

namespace pw::train {
namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::size_t, FlightSource> sources;
  std::size_t next = 1;
};

// Never destroyed: a signal may ask for a dump while the process exits.
Registry& registry() {
  static auto* r = new Registry;
  return *r;
}

// Touches every live record every 100 ms, from one thread while there is any: a rank stuck in a
// wait records nothing, and its file should still say until when its process lived.
class LiveToucher {
 public:
  static LiveToucher& instance() {
    static auto* t = new LiveToucher;   // never destroyed, as the registry
    return *t;
  }
  void add(pipeline::FlightLiveFile* file) {
    std::lock_guard lock(mutex_);
    files_.insert(file);
    if (!thread_.joinable()) thread_ = std::jthread([this](std::stop_token stop) { run(stop); });
  }
  // After it returns, `file` is not touched again.
  void remove(pipeline::FlightLiveFile* file) noexcept {
    std::jthread last;
    {
      std::lock_guard lock(mutex_);
      files_.erase(file);
      if (files_.empty()) last = std::move(thread_);
    }
    if (last.joinable()) {
      last.request_stop();
      wake_.notify_all();
    }
  }

 private:
  void run(std::stop_token stop) {
    std::unique_lock lock(mutex_);
    while (!stop.stop_requested()) {
      for (auto* f : files_) f->touch(pipeline::steady_now_ns());
      wake_.wait_for(lock, stop, std::chrono::milliseconds(100), [] { return false; });
    }
  }

  std::mutex mutex_;
  std::condition_variable_any wake_;
  std::set<pipeline::FlightLiveFile*> files_;
  std::jthread thread_;
};

// DIR/flight-rank<R><extension>, where prof --hang looks for a rank's record.
std::filesystem::path record_path(const std::string& dir, int rank, const char* extension) {
  return std::filesystem::path(dir) / ("flight-rank" + std::to_string(rank) + extension);
}

nlohmann::json dump_of(const FlightSource& s, const std::string& reason) {
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& e : s.recorder->snapshot()) entries.push_back(pipeline::to_json(e, s.chunks));
  return {{"format", "pipewright flight record 1"},
          {"rank", s.rank},
          {"stage", s.stage},
          {"replica", s.replica},
          {"stages", s.stages},
          {"replicas", s.replicas},
          {"chunks", s.chunks},
          {"pid", static_cast<long long>(getpid())},
          {"host", pipeline::flight_host_name()},
          {"reason", reason},
          {"dumped_ns", pipeline::steady_now_ns()},
          {"capacity", s.recorder->capacity()},
          {"program", s.program},
          {"entries", std::move(entries)}};
}

}  // namespace

FlightRegistration::FlightRegistration(const FlightSource& source) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  id_ = r.next++;
  r.sources[id_] = source;
}

FlightRegistration::~FlightRegistration() {
  stop_live();
  if (id_ == 0) return;
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  r.sources.erase(id_);
}

FlightRegistration::FlightRegistration(FlightRegistration&& other) noexcept
    : id_(other.id_), live_(std::move(other.live_)) {
  other.id_ = 0;
}

FlightRegistration& FlightRegistration::operator=(FlightRegistration&& other) noexcept {
  if (this != &other) {
    FlightRegistration gone(std::move(*this));
    id_ = other.id_;
    live_ = std::move(other.live_);
    other.id_ = 0;
  }
  return *this;
}

void FlightRegistration::keep_live_record_in(const std::string& dir) {
  FlightSource source;
  {
    auto& r = registry();
    std::lock_guard lock(r.mutex);
    const auto it = r.sources.find(id_);
    PW_CHECK(it != r.sources.end(), "a live flight record of a rank that is not registered");
    source = it->second;
  }
  const auto path = record_path(dir, source.rank, ".live");
  if (live_ && live_->path() == path.string()) return;
  stop_live();
  std::error_code made;
  std::filesystem::create_directories(dir, made);
  if (made) throw InputError("debug folder " + dir + ": cannot create it (" + made.message() + ")");
  live_ = std::make_unique<pipeline::FlightLiveFile>(
      path.string(),
      pipeline::FlightLiveIdentity{source.rank, source.stage, source.replica, source.stages, source.replicas,
                                   source.chunks, source.program},
      source.recorder->capacity());
  source.recorder->mirror_to(live_.get());
  LiveToucher::instance().add(live_.get());
}

void FlightRegistration::stop_live() noexcept {
  if (!live_) return;
  LiveToucher::instance().remove(live_.get());
  {
    auto& r = registry();
    std::lock_guard lock(r.mutex);
    if (const auto it = r.sources.find(id_); it != r.sources.end()) it->second.recorder->mirror_to(nullptr);
  }
  live_->remove();
  live_.reset();
}

int dump_flight_records(const std::string& dir, const std::string& reason) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  int written = 0;
  try {
    std::filesystem::create_directories(dir);
    for (const auto& [id, source] : r.sources) {
      const auto path = record_path(dir, source.rank, ".json");
      write_file_durably(path.string(), dump_of(source, reason).dump() + "\n");
      ++written;
    }
  } catch (const std::exception& e) {
    PW_LOG(Warn, "flight record: " << e.what());
  }
  if (written > 0) PW_LOG(Warn, "flight record of " << written << " rank(s) written to " << dir << " (" << reason << ")");
  return written;
}

void FlightDumpOnce::dump(const std::string& reason) {
  std::lock_guard lock(mutex_);
  if (done_) return;
  done_ = true;
  dump_flight_records(dir_, reason);
}

}  // namespace pw::train
