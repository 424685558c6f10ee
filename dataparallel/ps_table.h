#pragma once
// One shard of an embedding table on a parameter server: rows that start from a seeded initial
// value (the same whichever shard or process computes it; stored once first updated), updated in place
// by a sparse optimizer with per-row state. Safe for concurrent pulls and updates: rows live in
// lock stripes chosen by key.
#include <array>
#include <cstdint>
#include <iosfwd>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

namespace pw::dp {

enum class SparseOptimizerKind { Sgd = 1, Adagrad = 2, Adam = 3 };
SparseOptimizerKind parse_sparse_optimizer(const std::string& name);   // sgd, adagrad, adam
const char* sparse_optimizer_name(SparseOptimizerKind kind);

struct TableConfig {
  std::string name;
  int dim = 16;
  SparseOptimizerKind optimizer = SparseOptimizerKind::Adagrad;
  double lr = 0.01;
  std::uint64_t init_seed = 0;
  double init_scale = 0.01;
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
  // One optimizer step for each row with its gradient grads[i * dim ...].
  void apply(const std::int64_t* keys, std::size_t n, const float* grads);
  std::int64_t rows() const;   // rows stored (updated at least once)

  // The whole shard (rows and optimizer state), for snapshots.
  void write(std::ostream& out) const;
  void read(std::istream& in, const std::string& where);   // replaces the contents; InputError if malformed

 private:
  struct Row {
    std::vector<float> values;   // dim values, then the optimizer's state (0, dim or 2 * dim)
    std::int64_t steps = 0;      // updates so far (Adam's bias correction)
  };
  struct Stripe {
    mutable std::mutex mutex;
    std::unordered_map<std::int64_t, Row> rows;
  };
  static constexpr std::size_t kStripes = 64;

  Stripe& stripe(std::int64_t key) { return stripes_[static_cast<std::size_t>(shard_of(key, kStripes))]; }
  Row& row(Stripe& s, std::int64_t key);   // under s.mutex
  int state_floats() const;
  void update(Row& row, const float* grad);

  TableConfig config_;
  std::array<Stripe, kStripes> stripes_;
};

}  // namespace pw::dp
