#pragma once
// The flight recorders of the ranks running in this process, and their dumps: one JSON file per
// rank, DIR/flight-rank<R>.json, that `pipewright prof --hang DIR` reads to say where a stuck job
// was stuck. Written when a rank's job fails (a timeout, an abort: every local rank at that moment,
// once) and on request (the pipewright command's SIGUSR1). A rank may also keep its record in
// DIR/flight-rank<R>.live as it is written (pipeline/flight_live_file.h): what is left of a rank
// that ended without a dump (SIGKILL, a crash), or of a job stuck right now.
#include <memory>
#include <mutex>
#include <string>

#include "pipeline/flight_live_file.h"
#include "pipeline/flight_recorder.h"

namespace pw::train {

struct FlightSource {
  int rank = 0, stage = 0, replica = 0;
  int stages = 1, replicas = 1, chunks = 1;
  const pipeline::FlightRecorder* recorder = nullptr;
  std::string program;   // the stage's program with communication, in the text form
};

// Registered while the returned handle lives (an Engine holds one for its executor's recorder).
class FlightRegistration {
 public:
  FlightRegistration() = default;
  explicit FlightRegistration(const FlightSource& source);
  ~FlightRegistration();
  FlightRegistration(FlightRegistration&& other) noexcept;
  FlightRegistration& operator=(FlightRegistration&& other) noexcept;

  // From now on the record is also kept in DIR/flight-rank<R>.live (DIR created if needed), and
  // the file's clock shows every 100 ms that the process lives; the file is removed when this
  // registration goes, so only a rank that ended without unwinding leaves one. Error naming the
  // file when it cannot be made; a second call with another folder moves it there.
  void keep_live_record_in(const std::string& dir);

 private:
  void stop_live() noexcept;

  std::size_t id_ = 0;   // 0: none
  std::unique_ptr<pipeline::FlightLiveFile> live_;
};

// Writes every registered rank's record into `dir` (created if needed) with `reason`; returns how
// many files were written. Errors are logged, never thrown: a dump happens while something else
// already went wrong.
int dump_flight_records(const std::string& dir, const std::string& reason);

// The first call of a run dumps every local rank (the failing rank's reason); later calls, from
// ranks failing because of it, do nothing.
class FlightDumpOnce {
 public:
  explicit FlightDumpOnce(std::string dir) : dir_(std::move(dir)) {}
  void dump(const std::string& reason);

 private:
  std::string dir_;
  std::mutex mutex_;
  bool done_ = false;
};

}  // namespace pw::train
