#pragma once
// What one parameter server holds and does, without the wire: tables (each a ShardTable), the
// update mode, the count of every worker's pushes per step, and persistence. Every push is
// written to the table's write-ahead log before it is processed and acknowledged, and a snapshot
// is taken every `snapshot_every` pushes (when no step waits for more workers), so a restarted
// server (killed or not) replays the log and comes back with every acknowledged push.
//
// Update modes: Sync applies step t once every worker pushed it (their gradients summed, in key
// order) and answers a pull of step t + 1 only after that; Async applies each push as it comes;
// Bounded (staleness s) applies as Async but answers a pull of step t only once every worker's
// pushes of step t - s are applied.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <vector>

#include "core/error.h"
#include "dataparallel/ps_table.h"

namespace pw::dp {

enum class UpdateMode { Sync, Async, Bounded };
UpdateMode parse_update_mode(const std::string& name);   // sync, async, bounded
const char* update_mode_name(UpdateMode mode);

struct PsShardConfig {
  int shard = 0;
  int shards = 1;
  int workers = 1;
  UpdateMode mode = UpdateMode::Async;
  std::string dir;                   // persistence; empty: none
  std::int64_t snapshot_every = 200; // applied updates between snapshots
  std::size_t max_keys = std::size_t{1} << 22;   // per request
};

// A request the shard refuses (unknown table, wrong width, ...); the message is for the caller.
class PsRequestError : public InputError {
 public:
  using InputError::InputError;
};

struct PsStats {
  std::int64_t rows = 0, pulls = 0, pushes = 0, applied_through = -1;
};

class PsShard {
 public:
  // Loads `dir` when it holds an earlier run of this shard; InputError for a foreign or damaged one.
  explicit PsShard(PsShardConfig config);
  ~PsShard();   // a last snapshot when persistence is on (logs, never throws)

  void create_table(const TableConfig& config);
  std::vector<float> pull(const std::string& table, const std::vector<std::int64_t>& keys, std::int64_t step,
                          int staleness, std::chrono::steady_clock::time_point deadline);
  void push(const std::string& table, int worker, std::int64_t step, const std::vector<std::int64_t>& keys,
            const float* grads, std::size_t grad_floats);
  PsStats stats(const std::string& table);
  void snapshot();
  const PsShardConfig& config() const { return config_; }

 private:
  struct Table;
  Table& table(const std::string& name);
  void log_push(Table& t, std::int64_t step, int worker, const std::vector<std::int64_t>& keys, const float* grads);
  void process_push(Table& t, std::int64_t step, int worker, const std::vector<std::int64_t>& keys, const float* grads);
  void snapshot(Table& t);
  void write_manifest();
  void load();
  std::string path(const std::string& table, const char* ext) const;

  PsShardConfig config_;
  std::shared_mutex tables_mutex_;
  std::map<std::string, std::unique_ptr<Table>> tables_;
};

}  // namespace pw::dp
