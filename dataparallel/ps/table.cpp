#include "dataparallel/ps/table.h"

#include "models/rng.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <istream>
#include <limits>
#include <ostream>

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include "core/cpu_dispatch.h"
#include "core/error.h"

namespace pw::dp {

namespace {

std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

constexpr double kAdagradEps = 1e-10;
constexpr std::size_t kParallelApplyKeys = 4096;
// How many keys ahead lookups prefetch: enough to cover a memory latency with the work of a row.
constexpr std::size_t kPrefetchAhead = 8;
constexpr double kAdamBeta1 = 0.9, kAdamBeta2 = 0.999, kAdamEps = 1e-8;
constexpr std::uint64_t kSnapshotMagic = 0x31544e4853575070ULL;     // "pPWSHNT1": rows only
constexpr std::uint64_t kSnapshotMagicV2 = 0x32544e4853575070ULL;   // "pPWSHNT2": rows in recency order, counters, sketch

template <typename T>
void put(std::ostream& out, const T& v) {
  out.write(reinterpret_cast<const char*>(&v), sizeof v);
}
template <typename T>
T get(std::istream& in, const std::string& where) {
  T v{};
  in.read(reinterpret_cast<char*>(&v), sizeof v);
  PW_INPUT_CHECK(in.good(), where << " is cut short; expected a whole snapshot");
  return v;
}

// The sparse optimizers' row updates (a server spends much of a push here).
PW_CPU_CLONES void sgd_row(int d, double lr, const float* g, float* w) {
  for (int j = 0; j < d; ++j) w[j] -= static_cast<float>(lr * g[j]);
}

PW_CPU_CLONES void adagrad_row(int d, double lr, const float* g, float* w, float* acc) {
  for (int j = 0; j < d; ++j) {
    acc[j] += g[j] * g[j];
    w[j] -= static_cast<float>(lr * g[j] / (std::sqrt(static_cast<double>(acc[j])) + kAdagradEps));
  }
}

// Row-wise lazy Adam: a row's moments and bias correction advance only when it is updated.
PW_CPU_CLONES void adam_row(int d, double lr, std::int64_t steps, const float* g, float* w, float* m, float* v) {
  const double c1 = 1.0 - std::pow(kAdamBeta1, static_cast<double>(steps));
  const double c2 = 1.0 - std::pow(kAdamBeta2, static_cast<double>(steps));
  for (int j = 0; j < d; ++j) {
    m[j] = static_cast<float>(kAdamBeta1 * m[j] + (1.0 - kAdamBeta1) * g[j]);
    v[j] = static_cast<float>(kAdamBeta2 * v[j] + (1.0 - kAdamBeta2) * g[j] * g[j]);
    w[j] -= static_cast<float>(lr * (m[j] / c1) / (std::sqrt(v[j] / c2) + kAdamEps));
  }
}

}  // namespace

SparseOptimizerKind parse_sparse_optimizer(const std::string& name) { return parse_enum<SparseOptimizerKind>(name); }

const char* sparse_optimizer_name(SparseOptimizerKind kind) { return enum_name(kind).data(); }   // the table's names are literals

void check_table_config(const TableConfig& c) {
  PW_INPUT_CHECK(!c.name.empty() && c.name.size() <= 128, "a table needs a name of 1 to 128 characters");
  for (char ch : c.name)
    PW_INPUT_CHECK(std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.',
                   "table name '" << c.name << "': use letters, digits, '_', '-' and '.'");
  PW_INPUT_CHECK(c.dim >= 1 && c.dim <= 65536, "table '" << c.name << "': row width " << c.dim
                                                         << " outside 1..65536");
  PW_INPUT_CHECK(c.optimizer == SparseOptimizerKind::Sgd || c.optimizer == SparseOptimizerKind::Adagrad ||
                     c.optimizer == SparseOptimizerKind::Adam,
                 "table '" << c.name << "': unknown optimizer code " << static_cast<int>(c.optimizer));
  PW_INPUT_CHECK(std::isfinite(c.lr) && c.lr > 0, "table '" << c.name << "': learning rate must be positive");
  PW_INPUT_CHECK(std::isfinite(c.init_scale) && c.init_scale >= 0,
                 "table '" << c.name << "': init scale must be >= 0");
  check_table_bounds(c.bounds, c.name);
}

void initial_row(const TableConfig& c, std::int64_t key, float* out) {
  models::keyed_uniform_row(c.init_seed, key, c.dim, c.init_scale, out);
}

int shard_of(std::int64_t key, int shards) {
  return static_cast<int>(mix(static_cast<std::uint64_t>(key)) % static_cast<std::uint64_t>(shards));
}

ShardTable::ShardTable(TableConfig config) : config_(std::move(config)) {
  check_table_config(config_);
  if (!config_.bounds.admits_all()) sketch_ = std::make_unique<AdmissionSketch>();
  for (auto& s : stripes_) s.rows.reset(static_cast<std::size_t>(config_.dim + state_floats()));
}

int ShardTable::state_floats() const {
  switch (config_.optimizer) {
    case SparseOptimizerKind::Sgd: return 0;
    case SparseOptimizerKind::Adagrad: return config_.dim;
    case SparseOptimizerKind::Adam: return 2 * config_.dim;
  }
  return 0;
}

ShardTable::StripeOrder ShardTable::by_stripe(const std::int64_t* keys, std::size_t n) {
  StripeOrder o;
  std::vector<std::uint8_t> which(n);
  for (std::size_t i = 0; i < n; ++i) ++o.start[(which[i] = static_cast<std::uint8_t>(stripe_of(keys[i]))) + 1];
  for (std::size_t k = 0; k < kStripes; ++k) o.start[k + 1] += o.start[k];
  PW_CHECK(n <= std::numeric_limits<std::uint32_t>::max(), "a request of " << n << " keys");
  o.order.resize(n);
  auto next = o.start;
  for (std::size_t i = 0; i < n; ++i) o.order[next[which[i]]++] = static_cast<std::uint32_t>(i);
  return o;
}

void ShardTable::pull(const std::int64_t* keys, std::size_t n, float* out) {
  const auto dim = static_cast<std::size_t>(config_.dim);
  const auto [start, order] = by_stripe(keys, n);   // each stripe is locked once per request
  std::vector<RowStore::Slot> slots(n);
  std::vector<std::uint32_t> initial;   // keys with no stored row: computed outside the locks
  for (std::size_t k = 0; k < kStripes; ++k) {
    const std::size_t begin = start[k], end = start[k + 1];
    if (begin == end) continue;
    const Stripe& s = stripes_[k];
    std::lock_guard lock(s.mutex);
    // Two passes with prefetches a few keys ahead: the index probes, then the rows.
    for (std::size_t j = begin; j < end; ++j) {
      if (j + kPrefetchAhead < end) s.rows.prefetch_index(keys[order[j + kPrefetchAhead]]);
      slots[j] = s.rows.find(keys[order[j]]);
    }
    for (std::size_t j = begin; j < end; ++j) {
      if (j + kPrefetchAhead < end && slots[j + kPrefetchAhead] != RowStore::kNone)
        s.rows.prefetch_values(slots[j + kPrefetchAhead]);
      const std::uint32_t i = order[j];
      if (slots[j] == RowStore::kNone)
        initial.push_back(i);
      else
        std::memcpy(out + i * dim, s.rows.values(slots[j]), dim * sizeof(float));
    }
  }
  for (const std::uint32_t i : initial) initial_row(config_, keys[i], out + i * dim);
}

void ShardTable::update(RowStore& rows, RowStore::Slot slot, const float* g) {
  float* w = rows.values(slot);
  const std::int64_t steps = ++rows.steps(slot);
  switch (config_.optimizer) {
    case SparseOptimizerKind::Sgd: sgd_row(config_.dim, config_.lr, g, w); break;
    case SparseOptimizerKind::Adagrad: adagrad_row(config_.dim, config_.lr, g, w, w + config_.dim); break;
    case SparseOptimizerKind::Adam:
      adam_row(config_.dim, config_.lr, steps, g, w, w + config_.dim, w + 2 * config_.dim);
      break;
  }
}

void ShardTable::drop_oldest(ApplyEffects* effects) {
  const RecencyList::Entry oldest = recency_.oldest();
  {
    auto& s = stripe(oldest.key);
    std::lock_guard lock(s.mutex);
    s.rows.erase(oldest.key);
  }
  recency_.remove(recency_.oldest_handle());
  --stored_;
  const bool by_age = expired(oldest.stamp);
  ++(by_age ? counts_.expirations : counts_.evictions);
  if (effects) (by_age ? effects->expired : effects->evicted).push_back(oldest.key);
}

void ShardTable::apply(const std::int64_t* keys, std::size_t n, const float* grads, std::int64_t step,
                       const std::int32_t* sightings, ApplyEffects* effects) {
  const auto dim = static_cast<std::size_t>(config_.dim);
  const TableBounds& b = config_.bounds;
  const bool track = b.tracks_recency();
  std::lock_guard one_at_a_time(update_mutex_);
  clock_ = std::max(clock_, step);
  if (!b.any()) {
    apply_unbounded(keys, n, grads, effects);
    return;
  }
  for (std::size_t i = 0; i < n; ++i) {
    const std::int64_t key = keys[i];
    const float* g = grads + i * dim;
    auto& s = stripe(key);
    {
      std::lock_guard lock(s.mutex);
      if (const RowStore::Slot slot = s.rows.find(key); slot != RowStore::kNone) {
        update(s.rows, slot, g);
        if (track) recency_.touch(s.rows.recency(slot), clock_);
        continue;
      }
    }
    if (sketch_) {
      const int seen = sightings ? sightings[i] : 1;
      if (sketch_->add(key, seen) < b.admit_after) {
        counts_.dropped += seen;
        if (effects) effects->dropped += seen;
        continue;
      }
    }
    // Room first, so that the shard never holds more than max_rows rows, not even within a push.
    while (b.max_rows > 0 && stored_.load() >= b.max_rows) drop_oldest(effects);
    {
      std::lock_guard lock(s.mutex);
      const RowStore::Slot slot = s.rows.insert(key).first;
      initial_row(config_, key, s.rows.values(slot));
      update(s.rows, slot, g);
      if (track) s.rows.recency(slot) = recency_.add(key, clock_);
    }
    ++counts_.admissions;
    counts_.peak_rows = std::max(counts_.peak_rows, ++stored_);
    if (effects) effects->admitted.push_back(key);
  }
  if (b.row_ttl > 0)
    while (!recency_.empty() && expired(recency_.oldest().stamp)) drop_oldest(effects);
}

// Under update_mutex_: every key's row updated (created from its initial row if new), each stripe
// locked once for all of its keys. Rows are independent, so the order does not change the result.
void ShardTable::apply_unbounded(const std::int64_t* keys, std::size_t n, const float* grads, ApplyEffects* effects) {
  const auto dim = static_cast<std::size_t>(config_.dim);
  const auto [start, order] = by_stripe(keys, n);
  std::vector<std::uint8_t> created(effects ? n : 0);
  std::vector<RowStore::Slot> slots(n);            // by position in `order`
  std::vector<std::uint8_t> fresh_row(n);
  std::atomic<std::int64_t> fresh{0};
  // As in pull: every key's slot first (prefetching probes ahead), then the updates (prefetching
  // rows and gradients ahead).
  auto apply_rows = [&](Stripe& s, std::size_t begin, std::size_t end, std::int64_t& made) {
    for (std::size_t j = begin; j < end; ++j) {
      if (j + kPrefetchAhead < end) s.rows.prefetch_index(keys[order[j + kPrefetchAhead]]);
      const std::uint32_t i = order[j];
      const auto [slot, inserted] = s.rows.insert(keys[i]);
      slots[j] = slot;
      if (inserted) {
        ++made;
        if (effects) created[i] = 1;
        fresh_row[j] = 1;
      }
    }
    const std::size_t grad_bytes = std::min<std::size_t>(dim * sizeof(float), 1024);
    for (std::size_t j = begin; j < end; ++j) {
      if (j + kPrefetchAhead < end) {
        s.rows.prefetch_values(slots[j + kPrefetchAhead]);
        const char* g = reinterpret_cast<const char*>(grads + order[j + kPrefetchAhead] * dim);
        for (std::size_t b = 0; b < grad_bytes; b += 64) __builtin_prefetch(g + b);
      }
      const std::uint32_t i = order[j];
      if (fresh_row[j]) initial_row(config_, keys[i], s.rows.values(slots[j]));
      update(s.rows, slots[j], grads + i * dim);
    }
  };
  auto apply_stripe = [&](std::size_t k) {
    if (start[k] == start[k + 1]) return;
    Stripe& s = stripes_[k];
    std::int64_t made = 0;
    std::lock_guard lock(s.mutex);
    try {
      apply_rows(s, start[k], start[k + 1], made);
    } catch (...) {   // the rows made before the failure are stored: count them
      fresh += made;
      throw;
    }
    fresh += made;
  };
  // Stripes are independent: a large push is applied on several cores.
  // Isolated: a thread waiting here must not pick up unrelated work (another table's apply) while
  // it holds this table's locks.
  if (n >= kParallelApplyKeys)
    tbb::this_task_arena::isolate([&] { tbb::parallel_for(std::size_t{0}, kStripes, apply_stripe); });
  else
    for (std::size_t k = 0; k < kStripes; ++k) apply_stripe(k);
  counts_.admissions += fresh.load();
  counts_.peak_rows = std::max(counts_.peak_rows, stored_ += fresh.load());
  if (effects)
    for (std::size_t i = 0; i < n; ++i)
      if (created[i]) effects->admitted.push_back(keys[i]);
}

bool ShardTable::holds(std::int64_t key) const {
  const auto& s = stripe(key);
  std::lock_guard lock(s.mutex);
  return s.rows.find(key) != RowStore::kNone;
}

ShardTable::Counts ShardTable::counts() const {
  std::lock_guard lock(update_mutex_);
  return counts_;
}

void ShardTable::write(std::ostream& out) const {
  // No update runs meanwhile, and every stripe stays locked from the count to the last row.
  std::lock_guard one_at_a_time(update_mutex_);
  std::vector<std::unique_lock<std::mutex>> locks;
  locks.reserve(kStripes);
  std::int64_t count = 0;
  for (const auto& s : stripes_) {
    locks.emplace_back(s.mutex);
    count += static_cast<std::int64_t>(s.rows.size());
  }
  put(out, kSnapshotMagicV2);
  put(out, static_cast<std::int32_t>(config_.dim));
  put(out, static_cast<std::int32_t>(state_floats()));
  put(out, count);
  const auto row_bytes = static_cast<std::streamsize>(static_cast<std::size_t>(config_.dim + state_floats()) * sizeof(float));
  auto put_row = [&](const RowStore& rows, std::int64_t key, RowStore::Slot slot, std::int64_t stamp) {
    put(out, key);
    put(out, rows.steps(slot));
    put(out, stamp);
    out.write(reinterpret_cast<const char*>(rows.values(slot)), row_bytes);
  };
  if (config_.bounds.tracks_recency()) {
    // Oldest first: reading them back in this order rebuilds the recency order.
    recency_.for_each_oldest_first([&](const RecencyList::Entry& e) {
      const RowStore& rows = stripe(e.key).rows;
      const RowStore::Slot slot = rows.find(e.key);
      PW_CHECK(slot != RowStore::kNone, "table '" << config_.name << "': row " << e.key << " is in the recency list but not stored");
      put_row(rows, e.key, slot, e.stamp);
    });
  } else {
    for (const auto& s : stripes_) s.rows.for_each([&](std::int64_t key, RowStore::Slot slot) { put_row(s.rows, key, slot, clock_); });
  }
  put(out, clock_);
  put(out, counts_.admissions);
  put(out, counts_.dropped);
  put(out, counts_.evictions);
  put(out, counts_.expirations);
  put(out, counts_.peak_rows);
  put(out, static_cast<std::uint8_t>(sketch_ ? 1 : 0));
  if (sketch_) sketch_->write(out);
}

void ShardTable::read_rows_v1(std::istream& in, const std::string& where) {
  const auto count = get<std::int64_t>(in, where);
  PW_INPUT_CHECK(count >= 0, where << ": negative row count");
  const auto floats = static_cast<std::size_t>(config_.dim + state_floats());
  std::vector<float> row;
  for (std::int64_t i = 0; i < count; ++i) {
    const auto key = get<std::int64_t>(in, where);
    const auto steps = get<std::int64_t>(in, where);
    row.resize(floats);
    in.read(reinterpret_cast<char*>(row.data()), static_cast<std::streamsize>(floats * sizeof(float)));
    PW_INPUT_CHECK(in.good(), where << " is cut short at row " << i << " of " << count);
    auto& s = stripe(key);
    std::lock_guard lock(s.mutex);
    const auto [slot, inserted] = s.rows.insert(key);
    std::memcpy(s.rows.values(slot), row.data(), floats * sizeof(float));
    s.rows.steps(slot) = steps;
    if (!inserted) continue;
    ++stored_;
    if (config_.bounds.tracks_recency()) s.rows.recency(slot) = recency_.add(key, -1);
  }
  counts_ = Counts{};
  counts_.admissions = counts_.peak_rows = stored_.load();
}

void ShardTable::read(std::istream& in, const std::string& where) {
  const auto magic = get<std::uint64_t>(in, where);
  PW_INPUT_CHECK(magic == kSnapshotMagic || magic == kSnapshotMagicV2, where << " is not a pipewright table snapshot");
  const auto dim = get<std::int32_t>(in, where);
  const auto state = get<std::int32_t>(in, where);
  PW_INPUT_CHECK(dim == config_.dim && state == state_floats(),
                 where << " holds rows of width " << dim << " (+" << state << " optimizer floats); table '"
                       << config_.name << "' has " << config_.dim << " (+" << state_floats() << ")");
  std::lock_guard one_at_a_time(update_mutex_);
  for (auto& s : stripes_) {
    std::lock_guard lock(s.mutex);
    s.rows.reset(static_cast<std::size_t>(config_.dim + state_floats()));
  }
  recency_.clear();
  stored_ = 0;
  clock_ = -1;
  if (sketch_) sketch_ = std::make_unique<AdmissionSketch>(sketch_->width());
  if (magic == kSnapshotMagic) {
    read_rows_v1(in, where);
    return;
  }
  const auto count = get<std::int64_t>(in, where);
  PW_INPUT_CHECK(count >= 0, where << ": negative row count");
  const auto& b = config_.bounds;
  PW_INPUT_CHECK(b.max_rows == 0 || count <= b.max_rows,
                 where << " holds " << count << " rows; table '" << config_.name << "' keeps at most " << b.max_rows
                       << " per shard");
  const auto floats = static_cast<std::size_t>(dim + state);
  std::vector<float> row;
  for (std::int64_t i = 0; i < count; ++i) {
    const auto key = get<std::int64_t>(in, where);
    const auto steps = get<std::int64_t>(in, where);
    const auto stamp = get<std::int64_t>(in, where);
    row.resize(floats);
    in.read(reinterpret_cast<char*>(row.data()), static_cast<std::streamsize>(floats * sizeof(float)));
    PW_INPUT_CHECK(in.good(), where << " is cut short at row " << i << " of " << count);
    auto& s = stripe(key);
    std::lock_guard lock(s.mutex);
    const auto [slot, inserted] = s.rows.insert(key);
    PW_INPUT_CHECK(inserted, where << " holds row " << key << " twice");
    std::memcpy(s.rows.values(slot), row.data(), floats * sizeof(float));
    s.rows.steps(slot) = steps;
    if (b.tracks_recency()) s.rows.recency(slot) = recency_.add(key, stamp);
    ++stored_;
  }
  clock_ = get<std::int64_t>(in, where);
  counts_.admissions = get<std::int64_t>(in, where);
  counts_.dropped = get<std::int64_t>(in, where);
  counts_.evictions = get<std::int64_t>(in, where);
  counts_.expirations = get<std::int64_t>(in, where);
  counts_.peak_rows = get<std::int64_t>(in, where);
  const bool has_sketch = get<std::uint8_t>(in, where) != 0;
  PW_INPUT_CHECK(has_sketch == (sketch_ != nullptr),
                 where << (has_sketch ? " holds an admission sketch" : " holds no admission sketch") << "; table '"
                       << config_.name << "' admits " << (sketch_ ? "after " + std::to_string(b.admit_after) + " sightings"
                                                                  : "every id at once"));
  if (sketch_) sketch_->read(in, where);
}

bool ShardTable::same_state(const ShardTable& other) const {
  std::scoped_lock both(update_mutex_, other.update_mutex_);
  if (stored_.load() != other.stored_.load() || clock_ != other.clock_ || !(counts_ == other.counts_)) return false;
  if ((sketch_ == nullptr) != (other.sketch_ == nullptr) || (sketch_ && !(*sketch_ == *other.sketch_))) return false;
  std::vector<RecencyList::Entry> mine, theirs;
  recency_.for_each_oldest_first([&](const RecencyList::Entry& e) { mine.push_back(e); });
  other.recency_.for_each_oldest_first([&](const RecencyList::Entry& e) { theirs.push_back(e); });
  if (mine.size() != theirs.size()) return false;
  for (std::size_t i = 0; i < mine.size(); ++i)
    if (mine[i].key != theirs[i].key || mine[i].stamp != theirs[i].stamp) return false;
  for (std::size_t k = 0; k < kStripes; ++k) {
    std::scoped_lock rows(stripes_[k].mutex, other.stripes_[k].mutex);
    const RowStore &mine_k = stripes_[k].rows, &theirs_k = other.stripes_[k].rows;
    if (mine_k.size() != theirs_k.size()) return false;
    const auto floats = static_cast<std::size_t>(config_.dim + state_floats());
    bool same = true;
    mine_k.for_each([&](std::int64_t key, RowStore::Slot slot) {
      const RowStore::Slot there = theirs_k.find(key);
      same = same && there != RowStore::kNone && theirs_k.steps(there) == mine_k.steps(slot) &&
             std::memcmp(theirs_k.values(there), mine_k.values(slot), floats * sizeof(float)) == 0;
    });
    if (!same) return false;
  }
  return true;
}

}  // namespace pw::dp
