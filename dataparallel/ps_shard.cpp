#include "dataparallel/ps_shard.h"

#include <algorithm>
#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "rpc/transport.h"

namespace pw::dp {

namespace {

constexpr std::uint32_t kWalMagic = 0x4c415750;   // "PWAL"

template <typename T>
void put(std::ostream& out, const T& v) {
  out.write(reinterpret_cast<const char*>(&v), sizeof v);
}
template <typename T>
bool get(std::istream& in, T& v) {
  in.read(reinterpret_cast<char*>(&v), sizeof v);
  return in.good();
}

nlohmann::json spec_json(const TableConfig& c) {
  return {{"name", c.name}, {"dim", c.dim}, {"optimizer", sparse_optimizer_name(c.optimizer)}, {"lr", c.lr},
          {"init_seed", c.init_seed}, {"init_scale", c.init_scale}};
}

TableConfig spec_from(const nlohmann::json& j) {
  TableConfig c;
  c.name = j.at("name").get<std::string>();
  c.dim = j.at("dim").get<int>();
  c.optimizer = parse_sparse_optimizer(j.at("optimizer").get<std::string>());
  c.lr = j.at("lr").get<double>();
  c.init_seed = j.at("init_seed").get<std::uint64_t>();
  c.init_scale = j.at("init_scale").get<double>();
  return c;
}

}  // namespace

UpdateMode parse_update_mode(const std::string& name) {
  if (name == "sync") return UpdateMode::Sync;
  if (name == "async") return UpdateMode::Async;
  if (name == "bounded") return UpdateMode::Bounded;
  throw InputError("unknown update mode '" + name + "'; accepted: sync, async, bounded");
}

const char* update_mode_name(UpdateMode mode) {
  switch (mode) {
    case UpdateMode::Sync: return "sync";
    case UpdateMode::Async: return "async";
    case UpdateMode::Bounded: return "bounded";
  }
  return "?";
}

struct PsShard::Table {
  explicit Table(TableConfig config, int workers) : data(std::move(config)), last_pushed(static_cast<std::size_t>(workers), -1) {}
  ShardTable data;
  std::mutex mutex;               // accounting, the log and the order updates are applied in
  std::condition_variable applied;
  std::vector<std::int64_t> last_pushed;   // per worker
  std::int64_t applied_through = -1;
  std::map<std::int64_t, std::pair<int, std::map<std::int64_t, std::vector<float>>>> pending;   // sync: step -> (pushes, sums)
  std::ofstream wal;
  std::uint64_t sequence = 0;     // updates applied since the table was made
  std::int64_t since_snapshot = 0;
  std::int64_t pulls = 0, pushes = 0;
};

PsShard::PsShard(PsShardConfig config) : config_(std::move(config)) {
  PW_INPUT_CHECK(config_.shards >= 1 && config_.shard >= 0 && config_.shard < config_.shards,
                 "shard " << config_.shard << " outside " << config_.shards << " shards");
  PW_INPUT_CHECK(config_.workers >= 1, "a parameter server needs at least one worker, got " << config_.workers);
  PW_INPUT_CHECK(config_.snapshot_every >= 1, "snapshots every " << config_.snapshot_every << " updates; need >= 1");
  if (!config_.dir.empty()) {
    std::filesystem::create_directories(config_.dir);
    load();
  }
}

PsShard::~PsShard() {
  if (config_.dir.empty()) return;
  try {
    snapshot();
  } catch (const std::exception& e) {
    PW_LOG(Warn, "parameter server shard " << config_.shard << ": last snapshot failed: " << e.what());
  }
}

std::string PsShard::path(const std::string& table, const char* ext) const {
  return (std::filesystem::path(config_.dir) / (table + ".shard" + std::to_string(config_.shard) + ext)).string();
}

PsShard::Table& PsShard::table(const std::string& name) {
  std::shared_lock lock(tables_mutex_);
  auto it = tables_.find(name);
  if (it == tables_.end()) {
    std::string known;
    for (const auto& [n, t] : tables_) known += (known.empty() ? "" : ", ") + n;
    throw PsRequestError("unknown table '" + name + "'" + (known.empty() ? "; no table was created" : "; tables: " + known));
  }
  return *it->second;
}

void PsShard::create_table(const TableConfig& config) {
  check_table_config(config);
  std::unique_lock lock(tables_mutex_);
  if (auto it = tables_.find(config.name); it != tables_.end()) {
    if (!(it->second->data.config() == config))
      throw PsRequestError("table '" + config.name + "' exists with another definition (row width " +
                           std::to_string(it->second->data.config().dim) + ", optimizer " +
                           sparse_optimizer_name(it->second->data.config().optimizer) + ")");
    return;
  }
  auto t = std::make_unique<Table>(config, config_.workers);
  if (!config_.dir.empty()) t->wal.open(path(config.name, ".wal"), std::ios::binary | std::ios::app);
  tables_.emplace(config.name, std::move(t));
  if (!config_.dir.empty()) write_manifest();
}

std::vector<float> PsShard::pull(const std::string& name, const std::vector<std::int64_t>& keys, std::int64_t step,
                                 int staleness, std::chrono::steady_clock::time_point deadline) {
  PW_INPUT_CHECK(keys.size() <= config_.max_keys, "a pull of " << keys.size() << " keys; at most "
                                                               << config_.max_keys << " per request");
  Table& t = table(name);
  if (staleness >= 0 && step - staleness >= 0) {
    std::unique_lock lock(t.mutex);
    const std::int64_t needed = step - staleness;
    if (!t.applied.wait_until(lock, deadline, [&] { return t.applied_through >= needed; })) {
      std::ostringstream behind;
      for (std::size_t w = 0; w < t.last_pushed.size(); ++w)
        if (t.last_pushed[w] < needed) behind << (behind.tellp() > 0 ? ", " : "") << w << " (at " << t.last_pushed[w] << ")";
      throw rpc::TimeoutError("shard " + std::to_string(config_.shard) + ", table '" + name + "': a pull of step " +
                              std::to_string(step) + " waits for every worker's pushes of step " +
                              std::to_string(needed) + "; behind: worker " + behind.str());
    }
  }
  std::vector<float> rows(keys.size() * static_cast<std::size_t>(t.data.config().dim));
  t.data.pull(keys.data(), keys.size(), rows.data());
  std::lock_guard lock(t.mutex);
  ++t.pulls;
  return rows;
}

void PsShard::push(const std::string& name, int worker, std::int64_t step, const std::vector<std::int64_t>& keys,
                   const float* grads, std::size_t grad_floats) {
  Table& t = table(name);
  const auto dim = static_cast<std::size_t>(t.data.config().dim);
  PW_INPUT_CHECK(keys.size() <= config_.max_keys, "a push of " << keys.size() << " keys; at most "
                                                               << config_.max_keys << " per request");
  if (grad_floats != keys.size() * dim)
    throw PsRequestError("table '" + name + "' has rows of width " + std::to_string(dim) + ": " +
                         std::to_string(keys.size()) + " keys need " + std::to_string(keys.size() * dim) +
                         " gradient values, got " + std::to_string(grad_floats));
  if (worker < 0 || worker >= config_.workers)
    throw PsRequestError("worker " + std::to_string(worker) + " outside the " + std::to_string(config_.workers) +
                         " workers this server was started for");
  std::unique_lock lock(t.mutex);
  const auto last = t.last_pushed[static_cast<std::size_t>(worker)];
  // The client retries a push whose answer it lost (this server restarted after logging it).
  if (step == last && last >= 0) return;
  if (step != last + 1)
    throw PsRequestError("worker " + std::to_string(worker) + " pushed step " + std::to_string(step) + " after step " +
                         std::to_string(last) + "; every step is pushed once, in order");
  log_push(t, step, worker, keys, grads);
  process_push(t, step, worker, keys, grads);
  ++t.pushes;
  if (!config_.dir.empty() && t.since_snapshot >= config_.snapshot_every && t.pending.empty()) snapshot(t);
}

// Under t.mutex: the push goes to the log (and so to the OS) before it is processed and acknowledged.
void PsShard::log_push(Table& t, std::int64_t step, int worker, const std::vector<std::int64_t>& keys,
                       const float* grads) {
  ++t.sequence;
  ++t.since_snapshot;
  if (!t.wal.is_open()) return;
  const auto n = static_cast<std::uint64_t>(keys.size());
  put(t.wal, kWalMagic);
  put(t.wal, t.sequence);
  put(t.wal, step);
  put(t.wal, static_cast<std::int32_t>(worker));
  put(t.wal, n);
  t.wal.write(reinterpret_cast<const char*>(keys.data()), static_cast<std::streamsize>(n * sizeof(std::int64_t)));
  t.wal.write(reinterpret_cast<const char*>(grads),
              static_cast<std::streamsize>(n * static_cast<std::uint64_t>(t.data.config().dim) * sizeof(float)));
  t.wal.flush();
  PW_CHECK(t.wal.good(), "parameter server shard " << config_.shard << ": cannot write the log of table '"
                                                   << t.data.config().name << "'");
}

// Under t.mutex (or while loading): counts the push and applies what it completes.
void PsShard::process_push(Table& t, std::int64_t step, int worker, const std::vector<std::int64_t>& keys,
                           const float* grads) {
  const auto dim = static_cast<std::size_t>(t.data.config().dim);
  t.last_pushed[static_cast<std::size_t>(worker)] = step;
  if (config_.mode == UpdateMode::Sync) {
    auto& [count, sums] = t.pending[step];
    for (std::size_t i = 0; i < keys.size(); ++i) {
      auto& sum = sums[keys[i]];
      if (sum.empty()) sum.assign(grads + i * dim, grads + (i + 1) * dim);
      else
        for (std::size_t j = 0; j < dim; ++j) sum[j] += grads[i * dim + j];
    }
    if (++count < config_.workers) return;
    // Every worker's gradients of this step, summed, applied once in key order.
    std::vector<std::int64_t> all_keys;
    std::vector<float> all_grads;
    for (auto& [k, g] : sums) {
      all_keys.push_back(k);
      all_grads.insert(all_grads.end(), g.begin(), g.end());
    }
    t.pending.erase(step);
    t.data.apply(all_keys.data(), all_keys.size(), all_grads.data());
    t.applied_through = step;
  } else {
    t.data.apply(keys.data(), keys.size(), grads);
    t.applied_through = *std::min_element(t.last_pushed.begin(), t.last_pushed.end());
  }
  t.applied.notify_all();
}

PsStats PsShard::stats(const std::string& name) {
  Table& t = table(name);
  std::lock_guard lock(t.mutex);
  return {t.data.rows(), t.pulls, t.pushes, t.applied_through};
}

void PsShard::snapshot() {
  if (config_.dir.empty()) return;
  std::shared_lock lock(tables_mutex_);
  for (auto& [name, t] : tables_) {
    std::lock_guard table_lock(t->mutex);
    snapshot(*t);
  }
}

// Under t.mutex: rows, optimizer state and accounting to a new file renamed into place; the log
// then starts afresh (records up to the snapshot's sequence are skipped if the truncation is lost).
void PsShard::snapshot(Table& t) {
  // A step still waiting for workers lives only in the log: keep the log as it is.
  if (!t.pending.empty()) return;
  const auto file = path(t.data.config().name, ".snap");
  const auto tmp = file + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    put(out, t.sequence);
    put(out, t.applied_through);
    put(out, static_cast<std::int32_t>(t.last_pushed.size()));
    for (auto v : t.last_pushed) put(out, v);
    t.data.write(out);
    out.flush();
    PW_CHECK(out.good(), "cannot write snapshot " << tmp);
  }

  std::filesystem::rename(tmp, file);
  t.wal.close();
  t.wal.open(path(t.data.config().name, ".wal"), std::ios::binary | std::ios::trunc);
  t.since_snapshot = 0;
}

void PsShard::write_manifest() {
  nlohmann::json tables = nlohmann::json::array();
  for (const auto& [name, t] : tables_) tables.push_back(spec_json(t->data.config()));
  const nlohmann::json j = {{"shard", config_.shard}, {"shards", config_.shards}, {"workers", config_.workers},
                            {"mode", update_mode_name(config_.mode)}, {"tables", tables}};
  const auto file = (std::filesystem::path(config_.dir) / ("shard" + std::to_string(config_.shard) + ".json")).string();
  {
    std::ofstream out(file + ".tmp", std::ios::trunc);
    out << j.dump(2) << "\n";
    PW_CHECK(out.good(), "cannot write " << file << ".tmp");
  }
  std::filesystem::rename(file + ".tmp", file);
}

void PsShard::load() {
  const auto file = (std::filesystem::path(config_.dir) / ("shard" + std::to_string(config_.shard) + ".json")).string();
  if (!std::filesystem::exists(file)) return;
  nlohmann::json j;
  try {
    std::ifstream in(file);
    j = nlohmann::json::parse(in);
    PW_INPUT_CHECK(j.at("shards").get<int>() == config_.shards && j.at("workers").get<int>() == config_.workers &&
                       j.at("mode").get<std::string>() == update_mode_name(config_.mode),
                   file << " is from a job of " << j.at("shards") << " shards, " << j.at("workers") << " workers, mode "
                        << j.at("mode") << "; this server has " << config_.shards << ", " << config_.workers << ", "
                        << update_mode_name(config_.mode));
    for (const auto& spec : j.at("tables")) {
      const auto c = spec_from(spec);
      tables_.emplace(c.name, std::make_unique<Table>(c, config_.workers));
    }
  } catch (const nlohmann::json::exception& e) {
    throw InputError(file + " is not a parameter-server manifest: " + e.what());
  }
  for (auto& [name, t] : tables_) {
    const auto snap = path(name, ".snap");
    if (std::filesystem::exists(snap)) {
      std::ifstream in(snap, std::ios::binary);
      std::int32_t workers = 0;
      PW_INPUT_CHECK(get(in, t->sequence) && get(in, t->applied_through) && get(in, workers) &&
                         workers == config_.workers,
                     snap << " is cut short or from another job");
      for (auto& v : t->last_pushed) PW_INPUT_CHECK(get(in, v), snap << " is cut short");
      t->data.read(in, snap);
    }
    // Replay what the log holds beyond the snapshot; a record cut short by a crash is dropped
    // (it was never acknowledged).
    std::ifstream wal(path(name, ".wal"), std::ios::binary);
    std::int64_t replayed = 0;
    const auto dim = static_cast<std::size_t>(t->data.config().dim);
    while (wal.peek() != EOF) {
      std::uint32_t magic = 0;
      std::uint64_t seq = 0, n = 0;
      std::int64_t step = 0;
      std::int32_t worker = 0;
      if (!get(wal, magic) || magic != kWalMagic || !get(wal, seq) || !get(wal, step) || !get(wal, worker) ||
          !get(wal, n) || n > config_.max_keys)
        break;
      std::vector<std::int64_t> keys(n);
      std::vector<float> grads(n * dim);
      wal.read(reinterpret_cast<char*>(keys.data()), static_cast<std::streamsize>(n * sizeof(std::int64_t)));
      wal.read(reinterpret_cast<char*>(grads.data()), static_cast<std::streamsize>(grads.size() * sizeof(float)));
      if (!wal.good() && !(wal.eof() && wal.gcount() == static_cast<std::streamsize>(grads.size() * sizeof(float))))
        break;
      if (seq <= t->sequence) continue;   // already in the snapshot
      if (worker < 0 || worker >= config_.workers) break;
      process_push(*t, step, worker, keys, grads.data());
      t->sequence = seq;
      ++replayed;
    }
    if (replayed > 0)
      PW_LOG(Info, "parameter server shard " << config_.shard << ": table '" << name << "' replayed " << replayed
                                             << " logged pushes");
    t->wal.open(path(name, ".wal"), std::ios::binary | std::ios::app);
  }
}

}  // namespace pw::dp
