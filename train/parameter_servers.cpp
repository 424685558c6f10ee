#include "train/parameter_servers.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "dataparallel/ps/client.h"
#include "dataparallel/ps/remote_rows_registry.h"
#include "dataparallel/ps/server.h"
#include "models/layers/embedding_bag.h"
#include "models/rng.h"
#include "rpc/job_token.h"
#include "train/job_config.h"

namespace pw::train {

namespace {

std::vector<rpc::HostPort> parse_addresses(const std::string& list) {
  const auto bad = [&](const std::string& problem) { return ConfigError("/ps/addresses", "'" + list + "': " + problem); };
  std::vector<rpc::HostPort> out;
  std::size_t at = 0;
  while (at <= list.size()) {
    const auto comma = list.find(',', at);
    const std::string item = list.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    if (item.empty()) throw bad("expected HOST:PORT[,HOST:PORT...]");
    try {
      out.push_back(rpc::parse_host_port(item));
    } catch (const InputError& e) {
      throw bad(e.what());
    }
    if (out.back().port == 0) throw bad(item + " needs a port other than 0");
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return out;
}

}  // namespace

dp::TableBounds ps_table_bounds(const JobConfig& job) { return ps_table_bounds(job.ps); }

dp::TableBounds ps_table_bounds(const ParameterServerConfig& o) {
  if (o.admit_after < 1 || o.admit_after > dp::kMaxAdmitAfter)
    throw ConfigError("/ps/admit_after", std::to_string(o.admit_after) + "; expected 1 to " +
                                             std::to_string(dp::kMaxAdmitAfter) + " sightings (1: every id at once)");
  if (o.max_rows < 0)
    throw ConfigError("/ps/max_rows", std::to_string(o.max_rows) + "; expected a positive row count per table and shard");
  if (o.row_ttl < 0) throw ConfigError("/ps/row_ttl", std::to_string(o.row_ttl) + "; expected a positive number of steps");
  return {o.admit_after, o.max_rows, o.row_ttl};
}

dp::PsShardConfig ps_shard_config(const JobConfig& job, int shard, int shards) {
  return ps_shard_config(job.ps, job.replicas.replicas, shard, shards);
}

dp::PsShardConfig ps_shard_config(const ParameterServerConfig& ps, int workers, int shard, int shards) {
  dp::PsShardConfig c;
  c.shard = shard;
  c.shards = shards;
  c.workers = workers;
  c.mode = ps.mode;
  if (const auto bounds = ps_table_bounds(ps); bounds.any()) c.bounds = bounds;
  return c;
}

// What makes the servers' rows one job's: the config's identity without what may differ between
// runs of that job (how long it trains, its timeouts, checkpoints and recovery, where its servers
// are), so a restart or a longer run of the same job is the same identity.
std::string server_claim_identity(const JobConfig& c) {
  auto j = to_json(c);
  for (const char* section : {"timeouts", "checkpoints", "recovery"}) j.erase(section);
  for (const char* key : {"steps", "epochs", "eval_batches"}) j["data"].erase(key);
  for (const char* key : {"servers", "addresses", "dir"}) j["ps"].erase(key);
  return config_hash(j);
}

std::unique_ptr<ParameterServers> ParameterServers::open(const JobConfig& c, std::vector<std::string> tables,
                                                         bool multi_process, rpc::Tls tls) {
  const auto& o = c.ps;
  const auto bounds = ps_table_bounds(c);
  if (o.servers == 0 && o.addresses.empty()) return nullptr;
  std::unique_ptr<ParameterServers> ps(new ParameterServers);
  ps->tables_ = std::move(tables);
  ps->tls_ = std::move(tls);
  ps->mode_ = o.mode;
  ps->bounds_ = bounds;
  ps->staleness_ = o.staleness;
  ps->timeout_seconds_ = c.timeouts.stage_seconds;
  if (!o.addresses.empty()) {
    ps->addresses_ = parse_addresses(o.addresses);
    if (o.servers != 0 && o.servers != static_cast<int>(ps->addresses_.size()))
      throw ConfigError("/ps/servers", std::to_string(o.servers) + " but /ps/addresses gives " +
                                           std::to_string(ps->addresses_.size()) + " server addresses");
    if (o.token.empty())
      throw ConfigError("/ps/token", "parameter servers at /ps/addresses need the job token they were started with");
    ps->token_ = o.token;
    // Servers started on their own: each must be the shard its place in the list says, for this
    // job's replicas and update mode, or keys would land on the wrong shards without a word.
    ps->admin_client().check_identities(c.replicas.replicas, o.mode);
    // And they must serve this job: rows another job trained would be this one's without a word.
    // A job resuming from a checkpoint takes them over (its restore replaces every table).
    ps->admin_client().claim(server_claim_identity(c), c.checkpoints.resume.empty() ? dp::PsClient::ClaimMode::Join
                                                                                    : dp::PsClient::ClaimMode::TakeOver);
    return ps;
  }
  if (multi_process)
    throw ConfigError("/ps/servers", std::to_string(o.servers) + " in a multi-process job, whose ranks cannot share "
                                     "servers run in one of them; start the servers with the launcher, or on their "
                                     "own, and give their /ps/addresses");
  if (o.servers < 1 || o.servers > 64)
    throw ConfigError("/ps/servers", std::to_string(o.servers) + "; expected 1 to 64 servers");
  ps->token_ = rpc::make_job_token();
  for (int s = 0; s < o.servers; ++s) {
    dp::PsShardConfig shard = ps_shard_config(c, s, o.servers);
    if (!o.dir.empty()) shard.dir = (std::filesystem::path(o.dir) / ("shard" + std::to_string(s))).string();
    ps->embedded_.push_back(std::make_unique<dp::PsServer>(rpc::HostPort{"127.0.0.1", 0}, shard, ps->token_,
                                                                rpc::GateLimits{}, ps->tls_));
    ps->addresses_.push_back(ps->embedded_.back()->address());
  }
  return ps;
}

ParameterServers::~ParameterServers() = default;

models::RemoteTableMaker ParameterServers::table_maker(const JobConfig& c) const {
  const auto& o = c.ps;
  // Without its own, the sparse optimizer is the dense one of the same name (sgd, adam, adagrad).
  const auto optimizer = o.optimizer ? *o.optimizer : parse_enum<dp::SparseOptimizerKind>(enum_name(c.optimizer.kind));
  const double lr = o.lr > 0                  ? o.lr
                    : c.optimizer.lr > 0      ? c.optimizer.lr
                    : optimizer == dp::SparseOptimizerKind::Adam ? 1e-3 : 1e-2;
  dp::PsBagOptions base;
  base.servers = addresses_;
  base.job_token = token_;
  base.update = mode_;
  base.staleness = staleness_;
  base.gradient_scale = 1.0 / static_cast<double>(c.replicas.replicas);
  base.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(timeout_seconds_ * 1000));
  base.traffic = traffic_;
  base.tls = tls_;
  base.table.optimizer = optimizer;
  base.table.lr = lr;
  base.table.bounds = bounds_;
  const std::uint64_t seed = c.seed;
  return [base, seed](const models::EmbeddingTableSpec& t) {
    dp::PsBagOptions b = base;
    b.table.name = t.name;
    b.table.dim = t.dim;
    // The rows a local EmbeddingBag of this model would start from (Init::keyed_rows).
    b.table.init_seed = models::hash_name(seed, t.name + ".weight");
    b.table.init_scale = models::embedding_bag_init_scale(t.rows);
    b.bag_size = t.bag_size;
    b.mode = t.mode;
    auto bag = std::make_unique<dp::PsEmbeddingBag>(std::move(b));
    if (auto* registry = dp::RemoteRowsRegistry::building()) registry->add(*bag, t.ids_from_model_input);
    return std::unique_ptr<models::Layer>(std::move(bag));
  };
}

std::string ParameterServers::describe() const {
  return std::to_string(addresses_.size()) + " parameter server" + (addresses_.size() == 1 ? "" : "s") + " (" +
         dp::update_mode_name(mode_) + (mode_ == dp::UpdateMode::Bounded ? " " + std::to_string(staleness_) : "") +
         (bounds_.any() ? ", " + dp::describe_bounds(bounds_) : "") +
         (embedded_.empty() ? "" : ", in this process") + ")";
}

void ParameterServers::add_summary(nlohmann::json& j) const {
  j["ps_shards"] = addresses_.size();
  j["ps_mode"] = dp::update_mode_name(mode_);
  if (mode_ != dp::UpdateMode::Sync) j["ps_staleness"] = staleness_;
  std::int64_t staleness = 0;
  std::int64_t rows = 0, admissions = 0, dropped = 0, evictions = 0, expirations = 0;
  std::int64_t peak = 0;   // the most rows one table held on one shard after any update
  std::vector<std::int64_t> per_shard(addresses_.size(), 0);
  auto client = admin_client();
  for (const auto& t : tables_) {
    const auto stats = client.stats(t);
    for (std::size_t s = 0; s < stats.size(); ++s) {
      rows += stats[s].rows;
      per_shard[s] += stats[s].rows;
      staleness = std::max(staleness, stats[s].max_pull_staleness);
      admissions += stats[s].admissions;
      dropped += stats[s].dropped_rows;
      evictions += stats[s].evictions;
      expirations += stats[s].expirations;
      peak = std::max(peak, stats[s].peak_rows);
    }
  }
  j["ps_rows"] = rows;
  j["ps_rows_per_shard"] = per_shard;
  if (bounds_.any()) {
    j["ps_admit_after"] = bounds_.admit_after;
    j["ps_max_rows"] = bounds_.max_rows;
    j["ps_row_ttl"] = bounds_.row_ttl;
  }
  j["ps_admissions"] = admissions;
  j["ps_dropped_rows"] = dropped;
  j["ps_evictions"] = evictions;
  j["ps_expirations"] = expirations;
  j["ps_peak_table_rows"] = peak;
  j["ps_pulled_rows"] = traffic_->pulled_rows.load();
  j["ps_pushed_rows"] = traffic_->pushed_rows.load();
  j["ps_pull_seconds"] = static_cast<double>(traffic_->pull_ns.load()) * 1e-9;
  j["ps_push_seconds"] = static_cast<double>(traffic_->push_ns.load()) * 1e-9;
  j["ps_prefetched_rows"] = traffic_->prefetched_rows.load();
  j["ps_lookup_waits"] = traffic_->lookup_waits.load();
  j["ps_lookup_wait_seconds"] = static_cast<double>(traffic_->lookup_wait_ns.load()) * 1e-9;
  j["ps_push_waits"] = traffic_->push_waits.load();
  j["ps_push_wait_seconds"] = static_cast<double>(traffic_->push_wait_ns.load()) * 1e-9;
  j["ps_max_pull_staleness"] = staleness;
}

dp::PsClient ParameterServers::admin_client() const {
  return dp::PsClient(addresses_, token_, 0, std::chrono::milliseconds(static_cast<std::int64_t>(timeout_seconds_ * 1000)),
                      tls_);
}

std::vector<ParameterServers::PsCheckpointFile> ParameterServers::checkpoint(const std::string& folder,
                                                                             std::int64_t step) {
  PW_INPUT_CHECK(!folder.empty(), "a parameter-server checkpoint needs a folder");
  return admin_client().checkpoint(std::filesystem::absolute(folder).string(), step);
}

void ParameterServers::restore(const std::string& folder) {
  PW_INPUT_CHECK(!folder.empty(), "restoring parameter servers needs a checkpoint folder");
  admin_client().restore(std::filesystem::absolute(folder).string());
}

}  // namespace pw::train
