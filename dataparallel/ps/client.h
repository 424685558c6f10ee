#pragma once
// A worker's side of the parameter servers: keys go to their shard by hash, each request is
// batched per shard and the shards are asked in parallel; rows come back in the caller's key
// order. Every call has a deadline; a server's refusal is an InputError naming the shard.
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "dataparallel/ps/shard.h"
#include "dataparallel/ps/table.h"
#include "rpc/host_port.h"
#include "rpc/tls.h"

namespace pw::dp {

class PsConnection;

class PsClient {
 public:
  // With `tls`, every connection is mutual TLS (rpc/tls.h); a failed handshake is a TlsError naming
  // the shard and its address, not retried.
  PsClient(std::vector<rpc::HostPort> shards, std::string job_token, int worker,
           std::chrono::milliseconds timeout = std::chrono::seconds(60), rpc::Tls tls = {});
  ~PsClient();

  int shards() const { return static_cast<int>(pools_.size()); }
  // From any thread (the job failed elsewhere): every call under way and every later one fails at
  // once with AbortedError naming `why`, instead of waiting for other workers or its timeout.
  void abort(const std::string& why) noexcept;
  void create_table(const TableConfig& config);   // on every shard
  // Pulls and pushes of any size: each shard's keys go in chunks (ps_limits.h) over up to
  // kPsConnectionsPerShard connections at once.
  // The rows of `keys` (unique), [keys.size() * dim]. staleness: see PsShard (negative: no wait).
  std::vector<float> pull(const std::string& table, int dim, const std::vector<std::int64_t>& keys, std::int64_t step,
                          int staleness);
  // The same into rows[keys.size() * dim] (the caller's memory: rows are written straight from the socket).
  void pull(const std::string& table, int dim, const std::vector<std::int64_t>& keys, std::int64_t step, int staleness,
            float* rows);
  // Gradients of `keys` (unique), [keys.size() * dim]; every shard hears of the step. `worker`
  // (default: the client's own) lets one process push for several embedded replicas.
  void push(const std::string& table, int dim, const std::vector<std::int64_t>& keys, const std::vector<float>& grads,
            std::int64_t step, std::optional<int> worker = std::nullopt);
  struct ShardReport {
    std::int64_t rows = 0, pulls = 0, pushes = 0, applied_through = -1;
    std::int64_t max_pull_staleness = 0;   // PsStats::max_pull_staleness
    // Bounded tables: PsStats::admissions, dropped_rows, evictions, expirations, peak_rows.
    std::int64_t admissions = 0, dropped_rows = 0, evictions = 0, expirations = 0, peak_rows = 0;
    std::vector<std::int64_t> last_pushed;   // PsStats::last_pushed
  };
  std::vector<ShardReport> stats(const std::string& table);

  // Checks that the server at position s of the address list was started as shard s of shards(),
  // for `workers` workers, in `mode`: an InputError naming the address and both sides otherwise
  // (addresses swapped, missing or given twice; another replica count or update mode).
  void check_identities(int workers, UpdateMode mode);
  // Binds every shard to the job `job_id` (its config hash): InputError naming the address when a
  // shard serves another job, unless `mode` is TakeOver (a job resuming from a checkpoint).
  enum class ClaimMode { Join, TakeOver };
  void claim(const std::string& job_id, ClaimMode mode);

  // Every shard writes its tables as they stood after the pushes of steps < `step` under
  // folder/shard-<s>/ (the servers' file system), waiting up to the client's timeout for pushes
  // still missing; the files of every shard, in shard order. See PsShard::checkpoint.
  std::vector<PsCheckpointFile> checkpoint(const std::string& folder, std::int64_t step);
  // Every shard replaces its tables with the ones saved under `folder`, once every shard found its
  // part whole (a refused checkpoint changes no shard). See PsShard::restore.
  void restore(const std::string& folder);

 private:
  template <typename Call>
  void on_every_shard(const char* what, Call call);
  // body(connection, chunk) for chunks 0..chunks-1 of shard `shard`, spread over its connections.
  template <typename Body>
  void on_chunks(int shard, std::size_t chunks, Body body);
  PsConnection& control(int shard) { return *pools_[static_cast<std::size_t>(shard)].front(); }
  std::int64_t next_push_id();

  std::string token_;
  int worker_;
  std::chrono::milliseconds timeout_;
  std::vector<std::vector<std::unique_ptr<PsConnection>>> pools_;
  std::mutex push_id_mutex_;
  std::int64_t push_id_ = 0;   // per shard; the first also for control calls
};

}  // namespace pw::dp
