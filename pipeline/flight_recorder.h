#pragma once
// A stage's flight recorder (after PyTorch's NCCL flight recorder): the last N instructions it ran
// or is running, transfers included — step, micro-batch, chunk, the instruction's index in its
// program, the peer stage and the message's receiving virtual stage for sends and receives, bytes,
// start and end times, and whether it finished, failed or is still running. Cheap enough to be
// always on (one short critical section per instruction); read when a job stops on a timeout, an
// abort or a signal, to say where it was stuck (`pipewright prof --hang`).
#include <chrono>
#include <cstdint>
#include <mutex>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipeline/schedule.h"

namespace pw::pipeline {

enum class FlightState { Running, Done, Failed };

struct FlightEntry {
  std::uint64_t sequence = 0;       // 0, 1, 2... over the recorder's life
  std::int64_t step = 0;
  Instruction instruction;
  int index = 0;                    // in the stage's program
  int peer_stage = -1;              // sends and receives: the other stage of this pipeline
  int message_virtual_stage = -1;   // sends and receives: the virtual stage the message is addressed to
  std::int64_t bytes = 0;
  std::int64_t start_ns = 0;        // steady clock
  std::int64_t end_ns = 0;          // 0 while running
  FlightState state = FlightState::Running;
};

class FlightLiveFile;   // pipeline/flight_live_file.h

class FlightRecorder {
 public:
  static constexpr std::size_t kDefaultCapacity = 2000;
  explicit FlightRecorder(std::size_t capacity = kDefaultCapacity);

  // Returns the entry's sequence number, which finish() takes.
  std::uint64_t start(std::int64_t step, const Instruction& instruction, int index, int peer_stage,
                      int message_virtual_stage);
  void finish(std::uint64_t sequence, FlightState state, std::int64_t bytes = 0);

  std::vector<FlightEntry> snapshot() const;   // oldest first
  std::size_t capacity() const { return capacity_; }

  // Every entry recorded from now on (and those held now) is also written to `file` (of this
  // recorder's capacity), until mirror_to(nullptr); the caller keeps the file alive until then.
  void mirror_to(FlightLiveFile* file) const;

 private:
  const std::size_t capacity_;
  mutable std::mutex mutex_;
  std::vector<FlightEntry> ring_;
  std::uint64_t next_ = 0;
  mutable FlightLiveFile* live_ = nullptr;   // a copy of the ring outside the process, not its state
};

std::int64_t steady_now_ns();
const char* flight_state_name(FlightState state);   // "running", "done", "failed"
nlohmann::json to_json(const FlightEntry& e, int chunks);
FlightEntry flight_entry_from_json(const nlohmann::json& j);   // InputError naming what is wrong

}  // namespace pw::pipeline
