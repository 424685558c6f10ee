#pragma once
// Inside PsShard (not for other users): one table's rows with the accounting of the pushes that
// made them, and the byte layout of that state in snapshots and checkpoints.
#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <istream>
#include <map>
#include <mutex>
#include <ostream>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "dataparallel/ps/shard.h"
#include "dataparallel/ps/table.h"
#include "dataparallel/ps/wal.h"

namespace pw::dp {

// Sync mode: the gradients of one step, summed over the workers' pushes as they arrive.
struct PsPendingStep {
  int pushes = 0;                                   // workers whose push of the step is complete
  std::unordered_map<std::int64_t, std::size_t> at; // key -> its row in `sums`
  std::vector<std::int64_t> keys;                   // in order of arrival
  std::vector<std::int32_t> sightings;              // per key: the pushes that carried it
  std::vector<float> sums;                          // keys.size() rows of the table's width
  void clear() {   // keeps the buffers' capacity
    pushes = 0;
    at.clear();
    keys.clear();
    sightings.clear();
    sums.clear();
  }
};

// Sync mode: a step's summed gradients in key order, as they are applied. Kept by the table so
// each step reuses the memory of the one before (see PsPushBuffers).
struct PsSortedStep {
  std::vector<std::size_t> order;
  std::vector<std::int64_t> keys;
  std::vector<std::int32_t> sightings;
  std::vector<float> grads;
};

// The parts of one push held until its last part arrives.
struct PsHeldPush {
  std::int64_t step = -1;
  std::int64_t push_id = 0;
  int parts = 0;
  std::set<int> seen;
  std::vector<std::int64_t> keys;
  std::vector<float> grads;
  bool empty() const { return seen.empty(); }
  void clear() {   // keeps the buffers' capacity
    step = -1;
    push_id = 0;
    parts = 0;
    seen.clear();
    keys.clear();
    grads.clear();
  }
};

// Buffers of finished split pushes, kept for the next: a push of tens of MB into fresh memory
// spent more time in page faults than in applying it (perf, ps_bench's production batches). At
// most kPsSpareBuffers per table, so a server's idle memory does not grow with its workers.
struct PsPushBuffers {
  std::vector<std::int64_t> keys;
  std::vector<float> grads;
};
inline constexpr std::size_t kPsSpareBuffers = 2;

struct PsShard::Table {
  Table(TableConfig config, int workers)
      : data(std::move(config)), last_pushed(static_cast<std::size_t>(workers), -1),
        held(static_cast<std::size_t>(workers)) {}
  // Workers part-way through a push of several parts: its parts live only in memory and the log,
  // so snapshots (which truncate the log) wait until none is.
  bool partial_push() const {
    for (const auto& h : held)
      if (!h.empty()) return true;
    return false;
  }
  ShardTable data;
  std::mutex mutex;               // accounting, the log and the order updates are applied in
  std::condition_variable applied;
  std::vector<std::int64_t> last_pushed;   // per worker: the last step pushed whole
  std::vector<PsHeldPush> held;            // per worker: parts of its push of step last_pushed + 1
  std::int64_t applied_through = -1;
  std::map<std::int64_t, PsPendingStep> pending;   // sync: steps not yet pushed by every worker
  PsPendingStep spare_pending;    // sync: the buffers of the last step applied, for the next
  std::vector<PsPushBuffers> spare_buffers;   // of finished split pushes, for the next
  PsSortedStep sorted;            // sync: scratch of the step being applied
  PsWriteAheadLog wal;            // open whenever the shard has a folder, unless reopening it failed
  std::string wal_error;          // why it is not open
  bool wal_torn = false;          // an append failed and could not be cut off: pushes are refused
  bool retired = false;           // replaced by a restore: refuses pushes
  std::uint64_t sequence = 0;     // updates applied since the table was made
  std::int64_t since_snapshot = 0;
  std::int64_t pulls = 0, pushes = 0;
  std::int64_t max_pull_staleness = 0;   // the most steps behind a pull's step the applied ones were
  ApplyEffects last_effects;      // of the last push processed (bounded tables with a folder): logged after it
};

// The pushes a table's rows hold: applied_through, then each worker's last push folded in.
// `in` reads it back into a table of `workers` workers; false if the bytes end first.
void write_push_accounting(std::ostream& out, std::int64_t applied_through, const std::vector<std::int64_t>& last_pushed);
bool read_push_accounting(std::istream& in, std::int64_t& applied_through, std::vector<std::int64_t>& last_pushed);

// A table's definition in shard and checkpoint manifests (bounds absent in older ones: none).
nlohmann::json table_spec_json(const TableConfig& config);
TableConfig table_spec_from(const nlohmann::json& j);   // nlohmann exceptions for missing fields
// PsRequestError when `server` was started for other bounds than `table` has.
void check_server_bounds(const PsShardConfig& server, const TableConfig& table);

}  // namespace pw::dp
