#pragma once
// The parameter servers of a training job: where they are (given addresses, the ones
// `pipewright launch --ps K` started, or servers run in this process as threads), how DLRM's tables
// are put on them, and what the summary says about them.
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dataparallel/ps_embedding_bag.h"
#include "models/zoo/model_spec.h"
#include "rpc/host_port.h"
#include "train/job_config.h"

namespace pw::dp {
class PsServer;
}

namespace pw::train {

// The launcher tells its ranks where the servers it started listen: "HOST:PORT,HOST:PORT".
inline constexpr const char* kPsServersEnv = "PW_PS_SERVERS";

// The server side of a training job's flags: `workers` = --replicas, the update mode.
dp::PsShardConfig ps_shard_config(const JobConfig& c, int shard, int shards);

class ParameterServers {
 public:
  // nullptr when the job uses none. `multi_process`: a rank of a launched job (servers cannot
  // be threads of one rank).
  static std::unique_ptr<ParameterServers> open(const JobConfig& c, bool multi_process);
  ~ParameterServers();

  // Makes the model's embedding bags server-backed (dlrm only; InputError for other models).
  void plug_into(models::ModelOptions& mo, const JobConfig& c, const std::string& model);
  std::string describe() const;   // "2 parameter servers (sync, embedded)"
  void add_summary(nlohmann::json& j) const;   // ps_shards, ps_mode, ps_staleness, ps_rows, traffic

 private:
  ParameterServers() = default;
  std::vector<rpc::HostPort> addresses_;
  std::string token_;
  dp::UpdateMode mode_ = dp::UpdateMode::Sync;
  int staleness_ = 1;
  double timeout_seconds_ = 60.0;
  std::vector<std::string> tables_;
  std::vector<std::unique_ptr<dp::PsServer>> embedded_;
  std::shared_ptr<dp::PsTraffic> traffic_ = std::make_shared<dp::PsTraffic>();
};

}  // namespace pw::train
