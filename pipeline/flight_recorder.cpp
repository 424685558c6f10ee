#include "pipeline/flight_recorder.h"

#include "core/error.h"
#include "pipeline/flight_live_file.h"

namespace pw::pipeline {

std::int64_t steady_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

FlightRecorder::FlightRecorder(std::size_t capacity) : capacity_(capacity) {
  PW_CHECK(capacity >= 1, "a flight recorder holds at least one entry");
  ring_.reserve(capacity);
}

std::uint64_t FlightRecorder::start(std::int64_t step, const Instruction& instruction, int index, int peer_stage,
                                    int message_virtual_stage) {
  FlightEntry e;
  e.step = step;
  e.instruction = instruction;
  e.index = index;
  e.peer_stage = peer_stage;
  e.message_virtual_stage = message_virtual_stage;
  e.start_ns = steady_now_ns();
  std::lock_guard lock(mutex_);
  e.sequence = next_++;
  if (ring_.size() < capacity_) ring_.push_back(e);
  else ring_[e.sequence % capacity_] = e;
  if (live_) live_->write(e, next_);
  return e.sequence;
}

void FlightRecorder::finish(std::uint64_t sequence, FlightState state, std::int64_t bytes) {
  const auto now = steady_now_ns();
  std::lock_guard lock(mutex_);
  auto& e = ring_[sequence % capacity_];
  if (e.sequence != sequence) return;   // already overwritten
  e.state = state;
  e.end_ns = now;
  e.bytes = bytes;
  if (live_) live_->write(e, next_);
}

void FlightRecorder::mirror_to(FlightLiveFile* file) const {
  std::lock_guard lock(mutex_);
  PW_CHECK(file == nullptr || file->capacity() == capacity_,
           "a live flight record of " << file->capacity() << " entries for a recorder of " << capacity_);
  live_ = file;
  if (live_)
    for (const auto& e : ring_) live_->write(e, next_);
}

std::vector<FlightEntry> FlightRecorder::snapshot() const {
  std::lock_guard lock(mutex_);
  std::vector<FlightEntry> out;
  out.reserve(ring_.size());
  const std::uint64_t first = next_ > ring_.size() ? next_ - ring_.size() : 0;
  for (std::uint64_t s = first; s < next_; ++s) out.push_back(ring_[s % capacity_]);
  return out;
}

const char* flight_state_name(FlightState state) {
  switch (state) {
    case FlightState::Running: return "running";
    case FlightState::Done: return "done";
    case FlightState::Failed: return "failed";
  }
  return "?";
}

nlohmann::json to_json(const FlightEntry& e, int chunks) {
  return {{"sequence", e.sequence},
          {"step", e.step},
          {"instruction", instruction_text(e.instruction, chunks)},
          {"index", e.index},
          {"peer_stage", e.peer_stage},
          {"message_virtual_stage", e.message_virtual_stage},
          {"bytes", e.bytes},
          {"start_ns", e.start_ns},
          {"end_ns", e.end_ns},
          {"state", flight_state_name(e.state)}};
}

FlightEntry flight_entry_from_json(const nlohmann::json& j) {
  FlightEntry e;
  try {
    e.sequence = j.at("sequence").get<std::uint64_t>();
    e.step = j.at("step").get<std::int64_t>();
    const auto program = from_text(j.at("instruction").get<std::string>());
    PW_INPUT_CHECK(program.size() == 1, "an entry's instruction is one token");
    e.instruction = program.front();
    e.index = j.at("index").get<int>();
    e.peer_stage = j.at("peer_stage").get<int>();
    e.message_virtual_stage = j.at("message_virtual_stage").get<int>();
    e.bytes = j.at("bytes").get<std::int64_t>();
    e.start_ns = j.at("start_ns").get<std::int64_t>();
    e.end_ns = j.at("end_ns").get<std::int64_t>();
    const auto state = j.at("state").get<std::string>();
    PW_INPUT_CHECK(state == "running" || state == "done" || state == "failed",
                   "state '" << state << "'; expected running, done or failed");
    e.state = state == "running" ? FlightState::Running : state == "done" ? FlightState::Done : FlightState::Failed;
  } catch (const nlohmann::json::exception& ex) {
    throw InputError(std::string("a flight record entry: ") + ex.what());
  }
  return e;
}

}  // namespace pw::pipeline
