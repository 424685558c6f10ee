#pragma once
// Trace files: Chrome trace-event JSON (Perfetto and chrome://tracing open them) with
// pipewright's own description of the run under otherData.pipewright, written by `pipewright
// train --trace` and read back (several files merged) by `pipewright prof`.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/memory_trace.h"
#include "core/trace.h"

namespace pw::train {

struct TraceMeta {
  std::string model;
  std::string schedule = "1f1b";
  int stages = 1;
  int replicas = 1;
  int micro_batches = 1;
  int chunks = 1;
  std::vector<int> split;                  // first layer of each piece after the first
  std::vector<std::string> layer_names;    // the model's layers, in order
  // The job's config (to_json: no resources, no secrets), from which `pipewright prof` re-plans the
  // split; null in traces written before it was recorded.
  nlohmann::json job;
  // Where it ran, which the job's config leaves out: the device kind of the writing process's
  // first rank ("cpu:0", "cuda:1") and the cap of every device (0: none). prof re-plans with them.
  std::string device;
  std::int64_t device_memory = 0;
  int threads = 0;             // /resources/threads
  int prefetch_batches = 2;    // /resources/prefetch_batches (the loader's batches held on cpu:0)
  int process_rank = 0;                    // the rank of spans without a stage (data loading)
  std::int64_t clock_offset_ns = 0;        // added to this file's times: rank 0's clock
  std::int64_t dropped_spans = 0;          // the ring buffer overflowed by this many
};

struct TraceData {
  TraceMeta meta;
  std::vector<trace::Span> spans;   // times on the common clock
  std::vector<trace::MemorySample> memory;   // the memory counter tracks, times on the common clock
  std::vector<std::string> files;
};

int rank_of(const TraceMeta& meta, const trace::Span& span);

// Writes through a temporary file renamed into place. Each memory sample becomes two counter
// events ("ph": "C") of its rank: "memory in use" and "memory at peak", bytes by kind.
void write_chrome_trace(const std::string& path, const TraceMeta& meta, const std::vector<trace::Span>& spans,
                        const std::vector<trace::MemorySample>& memory = {});

// Reads and merges the files of one run. InputError naming the file for a file that is missing,
// not JSON (a truncated write), not a Chrome trace, not written by pipewright, or from another
// run than the first file.
TraceData read_traces(const std::vector<std::string>& paths);

// "trace.json" for rank `rank` of a multi-process job: "trace.rank2.json".
std::string rank_trace_path(const std::string& path, int rank);

}  // namespace pw::train
