#pragma once
// Where a rank learns who it is: the environment its launcher set. Read in this order:
// torchrun's (and `pipewright launch`'s) RANK / WORLD_SIZE / LOCAL_RANK / LOCAL_WORLD_SIZE;
// Open MPI's OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK / _LOCAL_SIZE (mpirun); Slurm's
// SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID (srun). The rendezvous is MASTER_ADDR:MASTER_PORT
// (port 29500 when only the address is set; MASTER_PORT + 1 under torchrun, whose agent holds
// MASTER_PORT), and the job token PW_JOB_TOKEN. Slurm's variables count only inside a job step
// started by srun (SLURM_STEP_ID set), not in the salloc shell or batch script around it.
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "rpc/host_port.h"

namespace pw::rpc {

// Automatic restarts (`pipewright launch --max-restarts K`, torchrun's TORCHELASTIC_RESTART_COUNT
// and TORCHELASTIC_MAX_RESTARTS). The launcher sets all three on every rank of every attempt:
// how many restarts came before this attempt (0 on the first; then 1, 2, ...; absent when another
// launcher started the rank, which means 0). A rank that sees a count > 0 resumes from the job's
// newest complete checkpoint.
inline constexpr const char* kRestartCountEnv = "PW_RESTART_COUNT";
// Why: a JSON array of one-line strings, oldest first, one per failed attempt ("[]" on the first),
// e.g. ["attempt 0: rank 1 (pid 1234) was killed by signal 9 (SIGKILL)"].
inline constexpr const char* kRestartCausesEnv = "PW_RESTART_CAUSES";
// The launcher's --max-restarts (0: a failure ends the job).
inline constexpr const char* kMaxRestartsEnv = "PW_MAX_RESTARTS";

struct RestartEnv {
  int count = 0;                     // PW_RESTART_COUNT
  int max_restarts = 0;              // PW_MAX_RESTARTS
  std::vector<std::string> causes;   // PW_RESTART_CAUSES, oldest first
};

struct LaunchEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  HostPort master;            // the rendezvous service of rank 0
  std::string job_token;
  std::string advertise_host;  // the address peers reach this rank at
  std::string launcher;        // "torchrun-style", "torchrun", "Open MPI" or "Slurm"
  RestartEnv restarts;         // the launcher's restarts before this attempt
  // PW_PLAIN_LINKS=1 (launch --plain-links): ranks on several hosts may run without TLS.
  bool plain_links = false;
};

inline constexpr const char* kPlainLinksEnv = "PW_PLAIN_LINKS";

inline constexpr int kDefaultMasterPort = 29500;

using EnvLookup = std::function<const char*(const char*)>;   // getenv, or a map in tests

// Zeros and no causes for unset variables; InputError naming the variable when one is malformed.
RestartEnv restart_env_from(const EnvLookup& lookup);
RestartEnv restart_env();   // from the process environment
// The JSON array of strings PW_RESTART_CAUSES holds (control characters escaped), and back
// (InputError, naming what was wrong, for anything but an array of strings).
std::string restart_causes_json(const std::vector<std::string>& causes);
std::vector<std::string> parse_restart_causes(std::string_view json);

// Nothing when no launcher variables are set or the world has one rank; InputError naming the
// variable for a malformed or inconsistent environment (rank outside the world, no MASTER_ADDR,
// no PW_JOB_TOKEN...).
std::optional<LaunchEnv> launch_env_from(const EnvLookup& lookup);
std::optional<LaunchEnv> launch_env();   // from the process environment

// The local address that routes to `master` (loopback for a loopback master). PW_ADVERTISE_ADDR
// overrides it.
std::string local_address_towards(const std::string& master_host);
bool is_loopback_host(const std::string& host);
// Whether `host` is this machine: a loopback name, or an address the kernel routes to itself (the
// local address towards it is its own). Resolving it sends nothing. False when it does not resolve.
bool is_this_host(const std::string& host);

}  // namespace pw::rpc
