#pragma once
// `pipewright prof --hang DIR`: reads every rank's flight record (DIR/flight-rank*.json, written
// by train --debug-dir, or DIR/flight-rank*.live, the record a rank keeps while it runs) and says
// in a few lines where the job was stuck: which rank waited for which peer's message that never
// came and why (the peer still computing, itself waiting, its program sending it only later or not
// at all, its process gone, no record from it), or which rank was computing.
#include <string>
#include <vector>

#include "pipeline/flight_recorder.h"

namespace pw::tools {

// Where a rank's record came from: its dump, or its live file (pipeline/flight_live_file.h) with
// its process still running on this host, gone from this host, or on another host.
enum class RecordSource { Dump, LiveProcessRunning, LiveProcessGone, LiveOtherHost };

struct RankFlightRecord {
  std::string file;
  RecordSource source = RecordSource::Dump;
  std::int64_t pid = 0;
  int rank = 0, stage = 0, replica = 0, stages = 1, replicas = 1, chunks = 1;
  std::string reason;
  std::int64_t dumped_ns = 0;   // a live file: when its process last showed it was alive
  std::vector<pipeline::Instruction> program;
  std::vector<pipeline::FlightEntry> entries;   // oldest first
};

// InputError naming the folder or the file when there is no record or one is malformed.
std::vector<RankFlightRecord> read_flight_records(const std::string& dir);

struct HangDiagnosis {
  std::string stuck;                // the root cause, one line
  std::vector<std::string> ranks;   // one line per rank: where it was
};

HangDiagnosis diagnose_hang(const std::vector<RankFlightRecord>& records);
std::string format_hang(const HangDiagnosis& d);

}  // namespace pw::tools
