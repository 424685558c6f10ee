#include "train/flight_dump.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

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
  if (id_ == 0) return;
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  r.sources.erase(id_);
}

FlightRegistration::FlightRegistration(FlightRegistration&& other) noexcept : id_(other.id_) { other.id_ = 0; }

FlightRegistration& FlightRegistration::operator=(FlightRegistration&& other) noexcept {
  if (this != &other) {
    FlightRegistration gone(std::move(*this));
    id_ = other.id_;
    other.id_ = 0;
  }
  return *this;
}

int dump_flight_records(const std::string& dir, const std::string& reason) {
  auto& r = registry();
  std::lock_guard lock(r.mutex);
  int written = 0;
  try {
    std::filesystem::create_directories(dir);
    for (const auto& [id, source] : r.sources) {
      const auto path = std::filesystem::path(dir) / ("flight-rank" + std::to_string(source.rank) + ".json");
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
