#include "dataparallel/ps_table.h"

#include "models/rng.h"

#include <cmath>
#include <cstring>
#include <istream>
#include <ostream>

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
constexpr double kAdamBeta1 = 0.9, kAdamBeta2 = 0.999, kAdamEps = 1e-8;
constexpr std::uint64_t kSnapshotMagic = 0x31544e4853575070ULL;   // "pPWSHNT1"

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

}  // namespace

SparseOptimizerKind parse_sparse_optimizer(const std::string& name) {
  if (name == "sgd") return SparseOptimizerKind::Sgd;
  if (name == "adagrad") return SparseOptimizerKind::Adagrad;
  if (name == "adam") return SparseOptimizerKind::Adam;
  throw InputError("unknown sparse optimizer '" + name + "'; accepted: sgd, adagrad, adam");
}

const char* sparse_optimizer_name(SparseOptimizerKind kind) {
  switch (kind) {
    case SparseOptimizerKind::Sgd: return "sgd";
    case SparseOptimizerKind::Adagrad: return "adagrad";
    case SparseOptimizerKind::Adam: return "adam";
  }
  return "?";
}

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
}

void initial_row(const TableConfig& c, std::int64_t key, float* out) {
  models::keyed_uniform_row(c.init_seed, key, c.dim, c.init_scale, out);
}

int shard_of(std::int64_t key, int shards) {
  return static_cast<int>(mix(static_cast<std::uint64_t>(key)) % static_cast<std::uint64_t>(shards));
}

ShardTable::ShardTable(TableConfig config) : config_(std::move(config)) { check_table_config(config_); }

int ShardTable::state_floats() const {
  switch (config_.optimizer) {
    case SparseOptimizerKind::Sgd: return 0;
    case SparseOptimizerKind::Adagrad: return config_.dim;
    case SparseOptimizerKind::Adam: return 2 * config_.dim;
  }
  return 0;
}

ShardTable::Row& ShardTable::row(Stripe& s, std::int64_t key) {
  auto [it, fresh] = s.rows.try_emplace(key);
  if (fresh) {
    it->second.values.assign(static_cast<std::size_t>(config_.dim + state_floats()), 0.0f);
    initial_row(config_, key, it->second.values.data());
  }
  return it->second;
}

void ShardTable::pull(const std::int64_t* keys, std::size_t n, float* out) {
  const auto dim = static_cast<std::size_t>(config_.dim);
  for (std::size_t i = 0; i < n; ++i) {
    auto& s = stripe(keys[i]);
    std::unique_lock lock(s.mutex);
    const auto it = s.rows.find(keys[i]);
    if (it != s.rows.end()) {
      std::memcpy(out + i * dim, it->second.values.data(), dim * sizeof(float));
    } else {
      lock.unlock();
      initial_row(config_, keys[i], out + i * dim);
    }
  }
}

void ShardTable::update(Row& r, const float* g) {
  const int d = config_.dim;
  float* w = r.values.data();
  const double lr = config_.lr;
  ++r.steps;
  switch (config_.optimizer) {
    case SparseOptimizerKind::Sgd:
      for (int j = 0; j < d; ++j) w[j] -= static_cast<float>(lr * g[j]);
      break;
    case SparseOptimizerKind::Adagrad: {
      float* acc = w + d;
      for (int j = 0; j < d; ++j) {
        acc[j] += g[j] * g[j];
        w[j] -= static_cast<float>(lr * g[j] / (std::sqrt(static_cast<double>(acc[j])) + kAdagradEps));
      }
      break;
    }
    case SparseOptimizerKind::Adam: {
      // Row-wise lazy Adam: a row's moments and bias correction advance only when it is updated.
      float* m = w + d;
      float* v = w + 2 * d;
      const double c1 = 1.0 - std::pow(kAdamBeta1, static_cast<double>(r.steps));
      const double c2 = 1.0 - std::pow(kAdamBeta2, static_cast<double>(r.steps));
      for (int j = 0; j < d; ++j) {
        m[j] = static_cast<float>(kAdamBeta1 * m[j] + (1.0 - kAdamBeta1) * g[j]);
        v[j] = static_cast<float>(kAdamBeta2 * v[j] + (1.0 - kAdamBeta2) * g[j] * g[j]);
        w[j] -= static_cast<float>(lr * (m[j] / c1) / (std::sqrt(v[j] / c2) + kAdamEps));
      }
      break;
    }
  }
}

void ShardTable::apply(const std::int64_t* keys, std::size_t n, const float* grads) {
  const auto dim = static_cast<std::size_t>(config_.dim);
  for (std::size_t i = 0; i < n; ++i) {
    auto& s = stripe(keys[i]);
    std::lock_guard lock(s.mutex);
    update(row(s, keys[i]), grads + i * dim);
  }
}

std::int64_t ShardTable::rows() const {
  std::int64_t n = 0;
  for (const auto& s : stripes_) {
    std::lock_guard lock(s.mutex);
    n += static_cast<std::int64_t>(s.rows.size());
  }
  return n;
}

void ShardTable::write(std::ostream& out) const {
  // Every stripe stays locked from the count to the last row: a pull creating a row meanwhile
  // would otherwise make the count and the rows written disagree.
  std::vector<std::unique_lock<std::mutex>> locks;
  locks.reserve(kStripes);
  std::int64_t count = 0;
  for (const auto& s : stripes_) {
    locks.emplace_back(s.mutex);
    count += static_cast<std::int64_t>(s.rows.size());
  }
  put(out, kSnapshotMagic);
  put(out, static_cast<std::int32_t>(config_.dim));
  put(out, static_cast<std::int32_t>(state_floats()));
  put(out, count);
  for (const auto& s : stripes_) {
    for (const auto& [key, r] : s.rows) {
      put(out, key);
      put(out, r.steps);
      out.write(reinterpret_cast<const char*>(r.values.data()),
                static_cast<std::streamsize>(r.values.size() * sizeof(float)));
    }
  }
}

void ShardTable::read(std::istream& in, const std::string& where) {
  PW_INPUT_CHECK(get<std::uint64_t>(in, where) == kSnapshotMagic, where << " is not a pipewright table snapshot");
  const auto dim = get<std::int32_t>(in, where);
  const auto state = get<std::int32_t>(in, where);
  PW_INPUT_CHECK(dim == config_.dim && state == state_floats(),
                 where << " holds rows of width " << dim << " (+" << state << " optimizer floats); table '"
                       << config_.name << "' has " << config_.dim << " (+" << state_floats() << ")");
  const auto count = get<std::int64_t>(in, where);
  PW_INPUT_CHECK(count >= 0, where << ": negative row count");
  for (auto& s : stripes_) {
    std::lock_guard lock(s.mutex);
    s.rows.clear();
  }
  const auto floats = static_cast<std::size_t>(dim + state);
  for (std::int64_t i = 0; i < count; ++i) {
    const auto key = get<std::int64_t>(in, where);
    Row r;
    r.steps = get<std::int64_t>(in, where);
    r.values.resize(floats);
    in.read(reinterpret_cast<char*>(r.values.data()), static_cast<std::streamsize>(floats * sizeof(float)));
    PW_INPUT_CHECK(in.good(), where << " is cut short at row " << i << " of " << count);
    auto& s = stripe(key);
    std::lock_guard lock(s.mutex);
    s.rows[key] = std::move(r);
  }
}

}  // namespace pw::dp
