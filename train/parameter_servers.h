#pragma once
// The parameter servers of a training job: where they are (given addresses, the ones
// `pipewright launch --ps K` started, or servers run in this process as threads), how a model's
// embedding tables are put on them, and what the summary says about them.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dataparallel/ps/embedding_bag.h"
#include "models/remote_table.h"
#include "rpc/host_port.h"
#include "train/job_config.h"

namespace pw::dp {
class PsClient;
class PsServer;
}

namespace pw::train {

// The server side of a training job's flags: `workers` = --replicas, the update mode, and the
// table bounds when the job sets any (the servers then refuse tables with other bounds).
dp::PsShardConfig ps_shard_config(const JobConfig& c, int shard, int shards);
// The same from the job's "ps" block and its replica count (a server's own config file).
dp::PsShardConfig ps_shard_config(const ParameterServerConfig& ps, int workers, int shard, int shards);
// The bounds /ps/admit_after, /ps/max_rows and /ps/row_ttl give every table (ConfigError naming
// the field for a bad value).
dp::TableBounds ps_table_bounds(const JobConfig& c);
dp::TableBounds ps_table_bounds(const ParameterServerConfig& ps);

// The identity a job claims servers started on their own with (dp::PsClient::claim): the hash of
// its config without its length, timeouts, checkpoint and recovery settings and server addresses.
std::string server_claim_identity(const JobConfig& c);

class ParameterServers {
 public:
  // The servers of a job whose model keeps `tables` on them: started here as threads (JobConfig
  // ps.servers), or reached at ps.addresses; nullptr when the job has none. `multi_process`: a rank
  // of a launched job (servers cannot be threads of one rank).
  // `tls`: mutual TLS on every connection to them (and on the servers run here).
  static std::unique_ptr<ParameterServers> open(const JobConfig& c, std::vector<std::string> tables,
                                                bool multi_process, rpc::Tls tls = {});
  ~ParameterServers();

  // What builds the model's server-backed tables on a rank (open it as a models::RemoteTableScope
  // while the stage is built): a PsEmbeddingBag on these servers, registered with the stage's
  // RemoteRowsRegistry being built on this thread (dataparallel/ps/remote_rows_registry.h), if any.
  models::RemoteTableMaker table_maker(const JobConfig& c) const;
  std::string describe() const;   // "2 parameter servers (sync, embedded)"
  // ps_shards, ps_mode, ps_staleness, ps_rows, traffic; with bounds also ps_admit_after, ps_max_rows,
  // ps_row_ttl, ps_admissions, ps_dropped_rows, ps_evictions, ps_expirations, ps_peak_table_rows.
  void add_summary(nlohmann::json& j) const;

  // A file a shard wrote: path relative to `folder` ("shard-0/features.emb.0.table"), size, and
  // checksum_hex(checksum64(its bytes)) (core/durable_file.h).
  using PsCheckpointFile = dp::PsCheckpointFile;
  // Every shard writes its tables (rows and sparse-optimizer state, exactly as applied after the
  // pushes of steps < `step`, none of step `step` or later) under `folder` (created; one
  // subfolder per shard, folder/shard-<s>/, its manifest.json written last), each file
  // durably. Called by rank 0 at a step boundary, after every worker finished step `step` - 1
  // and before rank 0 starts step `step`. Blocks until every shard has written its files; waits
  // at most the job's stage timeout for pushes of step `step` - 1 still on their way
  // (rpc::TimeoutError naming the shard, table, step and workers behind). Remote servers write
  // to their own file system: there `folder` must be a path they can reach (made absolute here).
  // Returns the files written, shard by shard.
  std::vector<PsCheckpointFile> checkpoint(const std::string& folder, std::int64_t step);
  // Every shard replaces all its tables with the ones saved under `folder` (the shard count must
  // equal the one that saved it; otherwise InputError naming the folder and both counts). After
  // it, the servers behave as if the steps < saved step had just been applied (a pull of the
  // saved step answers at once in sync mode; each worker's next push is the saved step). Call it
  // before any worker pulls or pushes. Every shard reads and checks its part before any replaces
  // a table, so a missing, damaged or foreign checkpoint (InputError naming the file) changes
  // nothing.
  void restore(const std::string& folder);

 private:
  ParameterServers() = default;
  dp::PsClient admin_client() const;   // worker 0's identity; for calls that push nothing
  std::vector<rpc::HostPort> addresses_;
  std::string token_;
  rpc::Tls tls_;
  dp::UpdateMode mode_ = dp::UpdateMode::Sync;
  int staleness_ = 1;
  dp::TableBounds bounds_;
  double timeout_seconds_ = 60.0;
  std::vector<std::string> tables_;
  std::vector<std::unique_ptr<dp::PsServer>> embedded_;
  std::shared_ptr<dp::PsTraffic> traffic_ = std::make_shared<dp::PsTraffic>();
};

}  // namespace pw::train
