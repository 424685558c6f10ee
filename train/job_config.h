#pragma once
// The job's configuration (pipewright/job_config.h) and what the engine does with it: the identity
// hash ranks compare, and the rules a checkpoint's job must meet to be resumed.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipewright/job_config.h"
#include "rpc/tls.h"

namespace pw::train {

std::string config_hash(const nlohmann::json& identity);   // 16 hex digits

// /data/dataset in the JSON form of a job with JobConfig::program_data: "program:NAME".
inline constexpr const char* kProgramDataPrefix = "program:";
// "/pipeline/stages: 2 here, 4 there"; empty when equal.
std::string first_difference(const nlohmann::json& mine, const nlohmann::json& theirs);

// Why a checkpoint saved by job `saved` cannot resume job `mine` ("/model/width: 32 there, 16
// here"), or empty. The model, data, seed, optimizer and parameter servers must match; the
// pipeline's shape, split and replica count, the steps and the timeouts may differ.
std::string resume_difference(const nlohmann::json& saved, const nlohmann::json& mine);

// A field of the job that a resumed job may set otherwise than the checkpoint's job did (the
// pipeline's shape, the learning rate, the numerics, the recovery rules, ...): the new value
// applies, and fit logs it as an override. Where the job runs and for how long (steps, epochs,
// timeouts, checkpoints, addresses) are not overrides. The learning rates are compared after
// defaults.
struct ResumeOverride {
  std::string path;   // "/optimizer/lr"
  nlohmann::json saved, now;
};
std::vector<ResumeOverride> resume_overrides(const nlohmann::json& saved, const nlohmann::json& mine);

// The job's "ps" block alone, as in to_json(JobConfig) (a parameter server's own config file,
// train/ps_serve_config.h); from_json throws InputError naming the bad field.
nlohmann::json ps_config_to_json(const ParameterServerConfig& ps);
ParameterServerConfig ps_config_from_json(const nlohmann::json& j);

// /tls: all three files or none (ConfigError naming the missing one).
void check_tls_fields(const TlsConfig& tls);
// The job's TLS context for its links (null when TLS is off): check_tls_fields, then the files
// read and checked (InputError naming a bad file; rpc/tls.h).
rpc::Tls load_job_tls(const TlsConfig& tls);

// The optimizer's learning rate after defaults.
double effective_lr(const OptimizerSettings& o);

}  // namespace pw::train
