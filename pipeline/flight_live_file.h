#pragma once
// A stage's flight record kept in a file while it is written (DIR/flight-rank<R>.live): the
// recorder's ring mapped from the file (MAP_SHARED), so every instruction it records is in the
// kernel's page cache the moment it is recorded. A rank that ends without writing its JSON dump —
// killed with SIGKILL (the OOM killer's signal), crashed — still leaves its last instructions there,
// and a job that is stuck right now can be read without stopping it. The owner removes the file
// when it closes normally; `pipewright prof --hang` reads what is left beside the JSON dumps.
//
// Layout (native byte order, the machine's own): a header (magic "pwflight-live-1", identity, the
// process, how many entries were started, when the process last showed it was alive), `capacity`
// fixed-size entries (slot = sequence % capacity), then the stage's program as text. An entry
// carries its sequence twice, cleared first and set last, so a reader skips one that a kill cut or
// that is being written as it reads. The file's disk blocks are allocated when it is made (a full
// disk is an error then, not a SIGBUS later).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "pipeline/flight_recorder.h"

namespace pw::pipeline {

struct FlightLiveIdentity {
  int rank = 0, stage = 0, replica = 0;
  int stages = 1, replicas = 1, chunks = 1;
  std::string program;   // the stage's program with communication, in the text form
};

class FlightLiveFile {
 public:
  // Creates (or replaces) the file at `path` sized for `capacity` entries. Error naming the path
  // when it cannot be created or mapped.
  FlightLiveFile(std::string path, const FlightLiveIdentity& identity, std::size_t capacity);
  ~FlightLiveFile();   // unmaps; the file stays (remove() deletes it)
  FlightLiveFile(const FlightLiveFile&) = delete;
  FlightLiveFile& operator=(const FlightLiveFile&) = delete;

  std::size_t capacity() const { return capacity_; }
  const std::string& path() const { return path_; }

  // The entry of sequence e.sequence into its slot; `started`: entries started so far.
  void write(const FlightEntry& e, std::uint64_t started) noexcept;
  // The process is alive at steady time `now_ns` (a stuck rank records nothing new for a while).
  void touch(std::int64_t now_ns) noexcept;
  void remove() noexcept;   // deletes the file, if the one at its path is still this one

 private:
  std::string path_;
  std::size_t capacity_ = 0;
  std::size_t bytes_ = 0;
  void* map_ = nullptr;
  std::uint64_t device_ = 0, inode_ = 0;   // which file at path_ is this one
};

struct FlightLiveRecord {
  FlightLiveIdentity identity;
  std::int64_t pid = 0;
  std::string host;              // gethostname() of the writer
  std::int64_t alive_ns = 0;     // steady clock of the writer: its last record or touch
  std::size_t capacity = 0;
  std::vector<FlightEntry> entries;   // oldest first; entries a kill cut are left out
};

// InputError naming the file when it is not a whole live flight record.
FlightLiveRecord read_flight_live_file(const std::string& path);

// The writer's host name, as read_flight_live_file reports it.
std::string flight_host_name();

}  // namespace pw::pipeline
