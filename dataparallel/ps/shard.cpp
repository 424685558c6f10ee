#include "dataparallel/ps/shard.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/input_file.h"
#include "core/durable_file.h"
#include "core/error.h"
#include "core/json_text.h"
#include "core/log.h"
#include "dataparallel/ps/shard_table.h"
#include "rpc/transport.h"

namespace pw::dp {

namespace {

// A held push reserves room for at most this many parts (of at most kPsChunkBytes each) up front.
constexpr std::size_t kReservedParts = 16;

template <typename T>
void put(std::ostream& out, const T& v) {
  out.write(reinterpret_cast<const char*>(&v), sizeof v);
}
template <typename T>
bool get(std::istream& in, T& v) {
  in.read(reinterpret_cast<char*>(&v), sizeof v);
  return in.good();
}

}  // namespace

static TableBounds table_bounds_from(const nlohmann::json& j) {
  TableBounds b;   // absent in manifests written before tables had bounds
  b.admit_after = j.value("admit_after", 1);
  b.max_rows = j.value("max_rows", std::int64_t{0});
  b.row_ttl = j.value("row_ttl", std::int64_t{0});
  return b;
}

nlohmann::json table_spec_json(const TableConfig& c) {
  return {{"name", c.name}, {"dim", c.dim}, {"optimizer", sparse_optimizer_name(c.optimizer)}, {"lr", c.lr},
          {"init_seed", c.init_seed}, {"init_scale", c.init_scale}, {"admit_after", c.bounds.admit_after},
          {"max_rows", c.bounds.max_rows}, {"row_ttl", c.bounds.row_ttl}};
}

TableConfig table_spec_from(const nlohmann::json& j) {
  TableConfig c;
  c.name = j.at("name").get<std::string>();
  c.dim = j.at("dim").get<int>();
  c.optimizer = parse_sparse_optimizer(j.at("optimizer").get<std::string>());
  c.lr = j.at("lr").get<double>();
  c.init_seed = j.at("init_seed").get<std::uint64_t>();
  c.init_scale = j.at("init_scale").get<double>();
  c.bounds = table_bounds_from(j);
  return c;
}

void check_server_bounds(const PsShardConfig& server, const TableConfig& table) {
  if (server.bounds && !(*server.bounds == table.bounds))
    throw PsRequestError("table '" + table.name + "' asks for " + describe_bounds(table.bounds) +
                         "; this server was started for " + describe_bounds(*server.bounds));
}

UpdateMode parse_update_mode(const std::string& name) { return parse_enum<UpdateMode>(name); }

const char* update_mode_name(UpdateMode mode) { return enum_name(mode).data(); }   // the table's names are literals

void write_push_accounting(std::ostream& out, std::int64_t applied_through, const std::vector<std::int64_t>& last_pushed) {
  put(out, applied_through);
  put(out, static_cast<std::int32_t>(last_pushed.size()));
  for (auto v : last_pushed) put(out, v);
}

bool read_push_accounting(std::istream& in, std::int64_t& applied_through, std::vector<std::int64_t>& last_pushed) {
  std::int32_t workers = 0;
  if (!get(in, applied_through) || !get(in, workers) || workers < 1 || workers > (1 << 20)) return false;
  last_pushed.assign(static_cast<std::size_t>(workers), -1);
  for (auto& v : last_pushed)
    if (!get(in, v)) return false;
  return true;
}

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

std::string PsShard::manifest_path() const {
  return (std::filesystem::path(config_.dir) / ("shard" + std::to_string(config_.shard) + ".json")).string();
}

std::shared_ptr<PsShard::Table> PsShard::table(const std::string& name) {
  std::shared_lock lock(tables_mutex_);
  auto it = tables_.find(name);
  if (it == tables_.end()) {
    std::string known;
    for (const auto& [n, t] : tables_) known += (known.empty() ? "" : ", ") + n;
    throw PsRequestError("unknown table '" + name + "'" + (known.empty() ? "; no table was created" : "; tables: " + known));
  }
  return it->second;
}

std::vector<std::shared_ptr<PsShard::Table>> PsShard::all_tables() {
  std::shared_lock lock(tables_mutex_);
  std::vector<std::shared_ptr<Table>> out;
  for (const auto& [name, t] : tables_) out.push_back(t);
  return out;
}

void PsShard::create_table(const TableConfig& config) {
  check_table_config(config);
  check_server_bounds(config_, config);
  std::unique_lock lock(tables_mutex_);
  if (auto it = tables_.find(config.name); it != tables_.end()) {
    const auto& had = it->second->data.config();
    if (!(had == config))
      throw PsRequestError("table '" + config.name + "' exists with another definition (row width " +
                           std::to_string(had.dim) + ", optimizer " + sparse_optimizer_name(had.optimizer) +
                           (had.bounds == config.bounds ? "" : ", " + describe_bounds(had.bounds)) + ")");
    return;
  }
  auto t = std::make_shared<Table>(config, config_.workers);
  if (!config_.dir.empty()) t->wal.open(path(config.name, ".wal"), PsWriteAheadLog::Open::Append);
  tables_.emplace(config.name, std::move(t));
  if (!config_.dir.empty()) write_manifest();
}

std::vector<float> PsShard::pull(const std::string& name, const std::vector<std::int64_t>& keys, std::int64_t step,
                                 int staleness, std::chrono::steady_clock::time_point deadline) {
  std::vector<float> rows;
  pull(name, keys, step, staleness, deadline, [&](std::size_t floats) {
    rows.resize(floats);
    return rows.data();
  });
  return rows;
}

void PsShard::pull(const std::string& name, const std::vector<std::int64_t>& keys, std::int64_t step, int staleness,
                   std::chrono::steady_clock::time_point deadline, const std::function<float*(std::size_t)>& output) {
  PW_INPUT_CHECK(keys.size() <= config_.max_keys, "a pull of " << keys.size() << " keys; at most "
                                                               << config_.max_keys << " per request");
  const auto held = table(name);
  Table& t = *held;
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
  t.data.pull(keys.data(), keys.size(), output(keys.size() * static_cast<std::size_t>(t.data.config().dim)));
  std::lock_guard lock(t.mutex);
  ++t.pulls;
  if (step >= 0) t.max_pull_staleness = std::max(t.max_pull_staleness, step - t.applied_through);
}

void PsShard::push(const std::string& name, int worker, std::int64_t step, const std::vector<std::int64_t>& keys,
                   const float* grads, std::size_t grad_floats, int part, int parts, std::int64_t push_id) {
  const auto held = table(name);
  Table& t = *held;
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
  if (parts < 1 || part < 0 || part >= parts)
    throw PsRequestError("push part " + std::to_string(part) + " of " + std::to_string(parts) +
                         "; parts are numbered 0 to parts - 1");
  const auto w = static_cast<std::size_t>(worker);
  std::unique_lock lock(t.mutex);
  const auto last = t.last_pushed[w];
  // The client retries a push whose answer it lost (this server restarted after logging it).
  if (step == last && last >= 0) return;
  if (step != last + 1)
    throw PsRequestError("worker " + std::to_string(worker) + " pushed step " + std::to_string(step) + " after step " +
                         std::to_string(last) + "; every step is pushed once, in order");
  const PsHeldPush& parts_held = t.held[w];
  if (!parts_held.empty() && parts_held.push_id == push_id && parts_held.parts != parts)
    throw PsRequestError("worker " + std::to_string(worker) + " pushed step " + std::to_string(step) + " in " +
                         std::to_string(parts) + " parts after announcing " + std::to_string(parts_held.parts));
  if (!parts_held.empty() && parts_held.push_id == push_id && parts_held.seen.count(part) != 0)
    return;   // a retried part
  const PsPushPart push{step, worker, part, parts, push_id, &keys, grads};
  log_push(t, push);
  accept_part(t, push);
  if (t.last_pushed[w] == step) ++t.pushes;   // the push is whole
  if (!t.last_effects.empty() && t.wal.is_open()) {
    // The push is applied and acknowledged either way: replay recomputes a lost effects record.
    try {
      t.wal.append_effects(t.sequence, t.last_effects);
    } catch (const std::exception& e) {
      PW_LOG(Warn, "parameter server shard " << config_.shard << ", table '" << name
                                             << "': could not log what a push did: " << e.what());
    }
  }
  if (!config_.dir.empty() && t.since_snapshot >= config_.snapshot_every && t.pending.empty() && !t.partial_push()) {
    // The push is logged and applied: a snapshot that fails only leaves the log longer (tried again next push).
    try {
      snapshot(t);
    } catch (const std::exception& e) {
      PW_LOG(Warn, "parameter server shard " << config_.shard << ", table '" << name << "': snapshot failed: " << e.what());
    }
  }
}

// Under t.mutex: the push goes to the log (and the disk) before it is processed and acknowledged;
// a push that cannot be logged is refused, not processed.
void PsShard::log_push(Table& t, const PsPushPart& push) {
  const std::string where = "parameter server shard " + std::to_string(config_.shard) + ", table '" +
                            t.data.config().name + "': push of step " + std::to_string(push.step) + " by worker " +
                            std::to_string(push.worker) + " refused: ";
  if (t.retired) throw Error(where + "the table was replaced by a restore; ask again");
  if (!config_.dir.empty()) {
    if (t.wal_torn) throw Error(where + t.wal_error + "; restart the server (it replays the log up to there)");
    if (!t.wal.is_open()) {
      try {
        t.wal.open(path(t.data.config().name, ".wal"), PsWriteAheadLog::Open::Append);
        t.wal_error.clear();
      } catch (const Error& e) {
        throw Error(where + e.what() + (t.wal_error.empty() ? "" : " (after the last snapshot: " + t.wal_error + ")"));
      }
    }
    try {
      t.wal.append(t.sequence + 1, push.step, static_cast<std::int32_t>(push.worker), *push.keys, push.grads,
                   t.data.config().dim, push.part, push.parts, push.push_id);
    } catch (const Error& e) {
      if (!t.wal.is_open()) {   // the failed record could not be cut off: nothing may follow it
        t.wal_torn = true;
        t.wal_error = e.what();
      }
      throw Error(where + e.what());
    }
  }
  ++t.sequence;
  ++t.since_snapshot;
}

// Under t.mutex (or while loading): a push of one part is applied at once; a part of several is
// held (a part of another push of the same step drops what was held: the worker started over)
// until the last arrives, then the whole push is applied. Replaying the log takes the same path.
void PsShard::accept_part(Table& t, const PsPushPart& push) {
  t.last_effects.clear();
  if (push.parts == 1) {
    process_push(t, push.step, push.worker, *push.keys, push.grads);
    return;
  }
  const auto dim = static_cast<std::size_t>(t.data.config().dim);
  PsHeldPush& held = t.held[static_cast<std::size_t>(push.worker)];
  if (held.empty() || held.push_id != push.push_id || held.step != push.step) {
    held.clear();
    held.step = push.step;
    held.push_id = push.push_id;
    held.parts = push.parts;
    if (held.keys.capacity() == 0 && !t.spare_buffers.empty()) {
      held.keys = std::move(t.spare_buffers.back().keys);
      held.grads = std::move(t.spare_buffers.back().grads);
      t.spare_buffers.pop_back();
    }
    // Parts are of near equal size: one reservation instead of a copy per doubling, bounded so
    // that a request's part count cannot ask for more than a few frames' worth up front.
    const std::size_t expect =
        push.keys->size() * std::min<std::size_t>(static_cast<std::size_t>(push.parts), kReservedParts);
    held.keys.reserve(expect);
    held.grads.reserve(expect * dim);
  }
  held.seen.insert(push.part);
  held.keys.insert(held.keys.end(), push.keys->begin(), push.keys->end());
  held.grads.insert(held.grads.end(), push.grads, push.grads + push.keys->size() * dim);
  if (static_cast<int>(held.seen.size()) < held.parts) return;
  // process_push does not reach `held` (a sync step keeps its own sums): whether or not the push
  // could be processed, its buffers go back to the table's spares and the worker holds nothing.
  t.spare_buffers.reserve(kPsSpareBuffers);   // so the release below cannot throw
  struct Release {
    Table& t;
    PsHeldPush& held;
    ~Release() {
      held.clear();
      if (t.spare_buffers.size() < kPsSpareBuffers)
        t.spare_buffers.push_back(PsPushBuffers{std::move(held.keys), std::move(held.grads)});
      held.keys = {};
      held.grads = {};
    }
  } release{t, held};
  process_push(t, held.step, push.worker, held.keys, held.grads.data());
}

// Under t.mutex (or while loading): counts a worker's whole push of `step` and applies what it
// completes: at once (async, bounded), or once every worker pushed the step (sync: their
// gradients summed in order of arrival, applied once in key order).
void PsShard::process_push(Table& t, std::int64_t step, int worker, const std::vector<std::int64_t>& keys,
                           const float* grads) {
  const auto dim = static_cast<std::size_t>(t.data.config().dim);
  t.last_pushed[static_cast<std::size_t>(worker)] = step;
  // The effects are logged only where there is a log, and only bounded tables have any to check.
  ApplyEffects* effects = t.data.bounded() && !config_.dir.empty() ? &t.last_effects : nullptr;
  if (config_.mode == UpdateMode::Sync) {
    const auto [slot, fresh_step] = t.pending.try_emplace(step);
    PsPendingStep& p = slot->second;
    if (fresh_step) {
      p = std::move(t.spare_pending);
      t.spare_pending = PsPendingStep{};
      p.keys.reserve(keys.size());
      p.sightings.reserve(keys.size());
      p.sums.reserve(keys.size() * dim);
    }
    p.at.reserve(p.at.size() + keys.size());
    for (std::size_t i = 0; i < keys.size(); ++i) {
      const auto [it, fresh] = p.at.try_emplace(keys[i], p.keys.size());
      const float* g = grads + i * dim;
      if (fresh) {
        p.keys.push_back(keys[i]);
        p.sightings.push_back(1);
        p.sums.insert(p.sums.end(), g, g + dim);
      } else {
        ++p.sightings[it->second];
        float* sum = p.sums.data() + it->second * dim;
        for (std::size_t j = 0; j < dim; ++j) sum[j] += g[j];
      }
    }
    if (++p.pushes < config_.workers) return;
    PsSortedStep& s = t.sorted;
    s.order.resize(p.keys.size());
    for (std::size_t i = 0; i < s.order.size(); ++i) s.order[i] = i;
    std::sort(s.order.begin(), s.order.end(), [&](std::size_t a, std::size_t b) { return p.keys[a] < p.keys[b]; });
    s.keys.resize(s.order.size());
    s.sightings.resize(s.order.size());
    s.grads.resize(s.order.size() * dim);
    for (std::size_t i = 0; i < s.order.size(); ++i) {
      s.keys[i] = p.keys[s.order[i]];
      s.sightings[i] = p.sightings[s.order[i]];
      std::memcpy(s.grads.data() + i * dim, p.sums.data() + s.order[i] * dim, dim * sizeof(float));
    }
    t.spare_pending = std::move(p);
    t.spare_pending.clear();
    t.pending.erase(step);
    t.data.apply(s.keys.data(), s.keys.size(), s.grads.data(), step, s.sightings.data(), effects);
    t.applied_through = step;
  } else {
    t.data.apply(keys.data(), keys.size(), grads, step, nullptr, effects);
    t.applied_through = *std::min_element(t.last_pushed.begin(), t.last_pushed.end());
  }
  t.applied.notify_all();
}

PsStats PsShard::stats(const std::string& name) {
  const auto held = table(name);
  Table& t = *held;
  std::lock_guard lock(t.mutex);
  const auto counts = t.data.counts();
  PsStats s;
  s.rows = t.data.rows();
  s.pulls = t.pulls;
  s.pushes = t.pushes;
  s.applied_through = t.applied_through;
  s.max_pull_staleness = t.max_pull_staleness;
  s.last_pushed = t.last_pushed;
  s.admissions = counts.admissions;
  s.dropped_rows = counts.dropped;
  s.evictions = counts.evictions;
  s.expirations = counts.expirations;
  s.peak_rows = counts.peak_rows;
  return s;
}

void PsShard::snapshot() {
  if (config_.dir.empty()) return;
  for (const auto& t : all_tables()) {
    std::lock_guard table_lock(t->mutex);
    snapshot(*t);
  }
}

// Under t.mutex: rows, optimizer state and accounting written durably, then the log starts
// afresh (records up to the snapshot's sequence are skipped if the truncation is lost). A log
// that cannot be reopened leaves the table refusing pushes (log_push) until it can.
void PsShard::snapshot(Table& t) {
  // A step still waiting for workers lives only in the log: keep the log as it is.
  if (!t.pending.empty() || t.partial_push() || t.retired) return;
  std::ostringstream state;
  put(state, t.sequence);
  write_push_accounting(state, t.applied_through, t.last_pushed);
  t.data.write(state);
  write_file_durably(path(t.data.config().name, ".snap"), state.view());
  t.since_snapshot = 0;
  t.wal.close();
  try {
    t.wal.open(path(t.data.config().name, ".wal"), PsWriteAheadLog::Open::Truncate);
    t.wal_error.clear();
    t.wal_torn = false;
  } catch (const Error& e) {
    t.wal_error = e.what();
    PW_LOG(Warn, "parameter server shard " << config_.shard << ": " << e.what() << "; pushes to table '"
                                           << t.data.config().name << "' are refused until it opens");
  }
}

void PsShard::write_manifest() {
  nlohmann::json tables = nlohmann::json::array();
  for (const auto& [name, t] : tables_) tables.push_back(table_spec_json(t->data.config()));
  const nlohmann::json j = {{"shard", config_.shard}, {"shards", config_.shards}, {"workers", config_.workers},
                            {"mode", update_mode_name(config_.mode)}, {"tables", tables}};
  write_file_durably(manifest_path(), j.dump(2) + "\n");
}

void PsShard::load() {
  const auto file = manifest_path();
  if (!std::filesystem::exists(file)) return;
  nlohmann::json j;
  try {
    const std::string text = read_whole(file, "parameter-server manifest", std::int64_t{64} << 20);
    check_json_depth(text, file);   // before parsing (core/json_text.h)
    j = nlohmann::json::parse(text);
    PW_INPUT_CHECK(j.at("shards").get<int>() == config_.shards && j.at("workers").get<int>() == config_.workers &&
                       j.at("mode").get<std::string>() == update_mode_name(config_.mode),
                   file << " is from a job of " << j.at("shards") << " shards, " << j.at("workers") << " workers, mode "
                        << j.at("mode") << "; this server has " << config_.shards << ", " << config_.workers << ", "
                        << update_mode_name(config_.mode));
    for (const auto& spec : j.at("tables")) {
      const auto c = table_spec_from(spec);
      if (config_.bounds && !(*config_.bounds == c.bounds))
        throw InputError(file + ": table '" + c.name + "' was made with " + describe_bounds(c.bounds) +
                         "; this server was started for " + describe_bounds(*config_.bounds));
      tables_.emplace(c.name, std::make_shared<Table>(c, config_.workers));
    }
  } catch (const nlohmann::json::exception& e) {
    throw InputError(file + " is not a parameter-server manifest: " + e.what());
  }
  for (auto& [name, t] : tables_) {
    const auto snap = path(name, ".snap");
    if (std::filesystem::exists(snap)) {
      std::ifstream in(snap, std::ios::binary);
      std::vector<std::int64_t> last_pushed;
      PW_INPUT_CHECK(get(in, t->sequence) && read_push_accounting(in, t->applied_through, last_pushed) &&
                         last_pushed.size() == static_cast<std::size_t>(config_.workers),
                     snap << " is cut short or from another job");
      t->last_pushed = std::move(last_pushed);
      t->data.read(in, snap);
    }
    // Replay what the log holds beyond the snapshot.
    std::int64_t replayed = 0;
    const std::uint64_t in_snapshot = t->sequence;
    PsWriteAheadLog::replay(path(name, ".wal"), t->data.config().dim, config_.max_keys, [&](const PsLogRecord& r) {
      if (r.kind == PsLogRecord::Kind::Effects) {
        // What the push just replayed did when it first came: the same, or the table is not the one it was.
        if (r.sequence > in_snapshot && r.sequence == t->sequence && replayed > 0 && !(r.effects == t->last_effects))
          throw InputError(path(name, ".wal") + ": replaying push " + std::to_string(r.sequence) +
                           " admits, evicts or expires other rows than it did when it came (" +
                           std::to_string(t->last_effects.admitted.size()) + "/" +
                           std::to_string(t->last_effects.evicted.size()) + "/" +
                           std::to_string(t->last_effects.expired.size()) + " against " +
                           std::to_string(r.effects.admitted.size()) + "/" + std::to_string(r.effects.evicted.size()) +
                           "/" + std::to_string(r.effects.expired.size()) + " logged)");
        return true;
      }
      if (r.sequence <= t->sequence) return true;   // already in the snapshot
      if (r.worker < 0 || r.worker >= config_.workers) return false;
      if (r.parts < 1 || r.part < 0 || r.part >= r.parts) return false;
      accept_part(*t, PsPushPart{r.step, r.worker, r.part, r.parts, r.push_id, &r.keys, r.grads.data()});
      t->sequence = r.sequence;
      ++replayed;
      return true;
    });
    if (replayed > 0)
      PW_LOG(Info, "parameter server shard " << config_.shard << ": table '" << name << "' replayed " << replayed
                                             << " logged pushes");
    t->wal.open(path(name, ".wal"), PsWriteAheadLog::Open::Append);
  }
}

}  // namespace pw::dp
