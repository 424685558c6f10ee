#pragma once
// One shard of an embedding table on a parameter server: rows that start from a seeded initial
// value (the same whichever shard or process computes it; stored once first updated), updated in place
// by a sparse optimizer with per-row state. Safe for concurrent pulls and updates: rows live in
// lock stripes chosen by key (ps_row_store.h), and updates run one at a time.
//
// A bounded table (TableConfig::bounds, ps_bounds.h) stores a row only on its id's N-th sighting,
// keeps at most max_rows rows (evicting the least recently updated) and drops rows not updated
// for row_ttl steps. Recency is the step clock of updates only (pulls do not count), so replaying
// the same updates rebuilds exactly the same table.
#include <array>
#include <atomic>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pipewright/enums.h"
#include "dataparallel/ps/admission.h"
#include "dataparallel/ps/bounds.h"
#include "dataparallel/ps/row_store.h"

namespace pw::dp {

// SparseOptimizerKind and its names: pipewright/enums.h.
SparseOptimizerKind parse_sparse_optimizer(const std::string& name);   // sgd, adagrad, adam
const char* sparse_optimizer_name(SparseOptimizerKind kind);

struct TableConfig {
  std::string name;
  int dim = 16;
  SparseOptimizerKind optimizer = SparseOptimizerKind::Adagrad;
  double lr = 0.01;
  std::uint64_t init_seed = 0;
  double init_scale = 0.01;
  TableBounds bounds;
  friend bool operator==(const TableConfig&, const TableConfig&) = default;
};
void check_table_config(const TableConfig& config);   // InputError naming the bad field

// The row a key starts with: uniform in [-init_scale, init_scale], a function of (seed, key, j).
void initial_row(const TableConfig& config, std::int64_t key, float* out);

// Which of `shards` servers holds `key` (a mixing hash, so consecutive ids spread evenly).
int shard_of(std::int64_t key, int shards);

class ShardTable {
 public:
  explicit ShardTable(TableConfig config);
  const TableConfig& config() const { return config_; }

  // Copies the rows of `keys` into out[n * dim]. A key never updated gets its initial row, computed
  // and not stored: rows are stored when first updated, so a stream of ids that are only looked up
  // costs no memory, and a pull of new ids costs no allocation.
  void pull(const std::int64_t* keys, std::size_t n, float* out);
  // One optimizer step for each row with its gradient grads[i * dim ...], as the update of `step`
  // (the table's step clock is the largest step applied; < 0: the clock stays). sightings[i]: the
  // pushes that carried keys[i] (sync mode sums several workers' pushes; nullptr: one each). In a
  // bounded table an id not stored is admitted once its sightings reach admit_after (its row is
  // created and this gradient applied), otherwise its gradient is dropped; a new row beyond
  // max_rows evicts the least recently updated one first; afterwards rows last updated row_ttl or
  // more steps before the clock expire. `effects`, if given, receives what happened.
  void apply(const std::int64_t* keys, std::size_t n, const float* grads, std::int64_t step = -1,
             const std::int32_t* sightings = nullptr, ApplyEffects* effects = nullptr);
  std::int64_t rows() const { return stored_.load(); }   // rows stored
  bool holds(std::int64_t key) const;                     // whether `key` has a stored row
  bool bounded() const { return config_.bounds.any(); }

  // Since the table was made (snapshots and checkpoints carry them).
  struct Counts {
    std::int64_t admissions = 0;   // rows created
    std::int64_t dropped = 0;      // gradient rows dropped: their id was not yet admitted
    std::int64_t evictions = 0;    // rows removed to stay under max_rows
    std::int64_t expirations = 0;  // rows removed after row_ttl steps without an update
    std::int64_t peak_rows = 0;    // the most rows stored after any update
    friend bool operator==(const Counts&, const Counts&) = default;
  };
  Counts counts() const;

  // The whole shard (rows and optimizer state), for snapshots.
  void write(std::ostream& out) const;
  void read(std::istream& in, const std::string& where);   // replaces the contents; InputError if malformed
  // The same rows (values, optimizer state, recency) and the same counters and sketch.
  bool same_state(const ShardTable& other) const;

 private:
  struct Stripe {
    mutable std::mutex mutex;
    RowStore rows;
  };
  static constexpr std::size_t kStripes = 64;

  static std::size_t stripe_of(std::int64_t key) { return static_cast<std::size_t>(shard_of(key, kStripes)); }
  Stripe& stripe(std::int64_t key) { return stripes_[stripe_of(key)]; }
  const Stripe& stripe(std::int64_t key) const { return stripes_[stripe_of(key)]; }
  // Positions 0..n-1 of `keys` grouped by stripe: stripe k's are order[start[k] .. start[k + 1]).
  struct StripeOrder {
    std::array<std::size_t, kStripes + 1> start{};
    std::vector<std::uint32_t> order;
  };
  static StripeOrder by_stripe(const std::int64_t* keys, std::size_t n);
  void apply_unbounded(const std::int64_t* keys, std::size_t n, const float* grads, ApplyEffects* effects);
  int state_floats() const;
  void update(RowStore& rows, RowStore::Slot slot, const float* grad);
  // Under update_mutex_: removes the least recently updated row (an expiry if it is expired).
  void drop_oldest(ApplyEffects* effects);
  bool expired(std::int64_t stamp) const { return config_.bounds.row_ttl > 0 && clock_ - stamp >= config_.bounds.row_ttl; }
  void read_rows_v1(std::istream& in, const std::string& where);

  TableConfig config_;
  std::array<Stripe, kStripes> stripes_;
  mutable std::mutex update_mutex_;   // one apply (or read) at a time; taken before any stripe's
  std::atomic<std::int64_t> stored_{0};
  std::int64_t clock_ = -1;   // the largest step applied
  Counts counts_;
  RecencyList recency_;                       // rows, newest update first (bounds.tracks_recency())
  std::unique_ptr<AdmissionSketch> sketch_;   // sightings of ids not stored (admit_after > 1)
};

}  // namespace pw::dp
