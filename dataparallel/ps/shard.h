#pragma once
// What one parameter server holds and does, without the wire: tables (each a ShardTable), the
// update mode, the count of every worker's pushes per step, and persistence. Every push is
// written to the table's write-ahead log and flushed to the disk before it is processed and
// acknowledged (a push that cannot be logged is refused), and a snapshot, written durably, is
// taken every `snapshot_every` pushes (when no step waits for more workers), so a restarted
// server (killed or not) replays the log and comes back with every acknowledged push.
//
// Job checkpoints (checkpoint/restore) are separate from that persistence: a snapshot of every
// table as it stood after the pushes of steps < t, written to a folder the job names.
//
// Update modes: Sync applies step t once every worker pushed it (their gradients summed, in key
// order) and answers a pull of step t + 1 only after that; Async applies each push as it comes;
// Bounded (staleness s) applies as Async but answers a pull of step t only once every worker's
// pushes of step t - s are applied.
#include <chrono>
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <vector>

#include "pipewright/enums.h"
#include "core/error.h"
#include "dataparallel/ps/limits.h"
#include "dataparallel/ps/table.h"

namespace pw::dp {

// UpdateMode and its names: pipewright/enums.h.
UpdateMode parse_update_mode(const std::string& name);   // sync, async, bounded
const char* update_mode_name(UpdateMode mode);

struct PsShardConfig {
  int shard = 0;
  int shards = 1;
  int workers = 1;
  UpdateMode mode = UpdateMode::Async;
  std::string dir;                   // persistence; empty: none
  std::int64_t snapshot_every = 200; // applied updates between snapshots
  std::size_t max_keys = kPsMaxKeysPerRequest;   // per request
  // The bounds every table must have (ps serve --admit-after/--max-rows/--row-ttl); a table asked
  // for with others is refused. Unset: each table brings its own.
  std::optional<TableBounds> bounds;
};

// A request the shard refuses (unknown table, wrong width, ...); the message is for the caller.
class PsRequestError : public InputError {
 public:
  using InputError::InputError;
};

struct PsStats {
  std::int64_t rows = 0, pulls = 0, pushes = 0, applied_through = -1;
  // Over every pull of a step t >= 0: the largest t - applied_through when it was answered (sync:
  // 1; bounded staleness s: at most s; async: however far behind the slowest worker was).
  std::int64_t max_pull_staleness = 0;
  std::vector<std::int64_t> last_pushed;   // per worker: the last step whose push is whole (-1: none)
  // Bounded tables (ShardTable::Counts), since the table was made: rows created, gradient rows
  // dropped before their id was admitted, rows evicted by the cap, rows expired, the most rows held.
  std::int64_t admissions = 0, dropped_rows = 0, evictions = 0, expirations = 0, peak_rows = 0;
};

enum class PsRestore { Replace, CheckOnly };

// A file of a job checkpoint, as the job's manifest lists it.
struct PsCheckpointFile {
  std::string path;   // relative to the checkpoint's folder: "shard-0/emb.table"
  std::int64_t bytes = 0;
  std::string checksum;   // checksum_hex(checksum64(the file's bytes))
};

// The subfolder of a checkpoint folder that holds shard `shard`'s part: "shard-0".
std::string ps_checkpoint_subfolder(int shard);

// One push call as the shard logs and processes it.
struct PsPushPart {
  std::int64_t step = 0;
  int worker = 0;
  int part = 0, parts = 1;
  std::int64_t push_id = 0;
  const std::vector<std::int64_t>* keys = nullptr;
  const float* grads = nullptr;
};

class PsShard {
 public:
  // Loads `dir` when it holds an earlier run of this shard; InputError for a foreign or damaged one.
  explicit PsShard(PsShardConfig config);
  ~PsShard();   // a last snapshot when persistence is on (logs, never throws)

  void create_table(const TableConfig& config);
  std::vector<float> pull(const std::string& table, const std::vector<std::int64_t>& keys, std::int64_t step,
                          int staleness, std::chrono::steady_clock::time_point deadline);
  // The same rows, written where output(floats) says once the wait is over (a server's reply
  // buffer: the rows are copied once, not twice).
  void pull(const std::string& table, const std::vector<std::int64_t>& keys, std::int64_t step, int staleness,
            std::chrono::steady_clock::time_point deadline, const std::function<float*(std::size_t floats)>& output);
  // One part of a worker's push of `step` (parts > 1 when the client split it). Parts are held
  // (and logged) until all `parts` parts of `push_id` are in, then applied as one push. A part
  // already held is ignored (a retry); a part of another push_id drops the parts held.
  void push(const std::string& table, int worker, std::int64_t step, const std::vector<std::int64_t>& keys,
            const float* grads, std::size_t grad_floats, int part = 0, int parts = 1, std::int64_t push_id = 0);
  PsStats stats(const std::string& table);
  void snapshot();
  const PsShardConfig& config() const { return config_; }

  // Writes every table (rows, optimizer state, the pushes they hold) to folder/shard-<shard>/,
  // one file per table and a manifest last, each durably. Waits until every worker's pushes of
  // steps < `step` are applied (rpc::TimeoutError at `deadline` naming the shard, table, step
  // and the workers behind); a step of `step` or later already applied is an error. In sync
  // mode the snapshot holds exactly the steps < `step`: pushes of later steps wait in `pending`
  // and are not written. Async and bounded apply each push as it comes, so a worker that
  // already pushed step `step` is in the snapshot, and recorded as having pushed it.
  std::vector<PsCheckpointFile> checkpoint(const std::string& folder, std::int64_t step,
                                           std::chrono::steady_clock::time_point deadline);
  // Replaces every table with the ones saved under folder/shard-<shard>/, as if their steps had
  // just been applied (nothing pending; the next push of each worker is the step after its
  // saved one). All or nothing: InputError naming the file for a missing, damaged or foreign
  // checkpoint, or naming the folder and both counts for another shard count. CheckOnly reads
  // and checks the same, and changes nothing.
  void restore(const std::string& folder, PsRestore how = PsRestore::Replace);

 private:
  struct Table;
  std::shared_ptr<Table> table(const std::string& name);
  std::vector<std::shared_ptr<Table>> all_tables();
  void log_push(Table& t, const PsPushPart& push);
  // Under t.mutex or while loading: holds a part, or applies a whole push (process_push).
  void accept_part(Table& t, const PsPushPart& push);
  void process_push(Table& t, std::int64_t step, int worker, const std::vector<std::int64_t>& keys, const float* grads);
  void snapshot(Table& t);
  void write_manifest();   // under tables_mutex_
  void load();
  std::string path(const std::string& table, const char* ext) const;
  std::string manifest_path() const;

  PsShardConfig config_;
  std::mutex checkpoint_mutex_;   // one checkpoint or restore at a time (a client may retry one)
  std::shared_mutex tables_mutex_;
  // Shared so that a request holding a table keeps it while a restore replaces the map.
  std::map<std::string, std::shared_ptr<Table>> tables_;
};

}  // namespace pw::dp
