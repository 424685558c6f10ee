#pragma once
// The job's TLS files as a launcher hands them to the processes it starts (rpc/tls.h).
#include <string>
#include <utility>
#include <vector>

#include "pipewright/job_config.h"

namespace pw::launcher {

// PW_TLS_CERT, PW_TLS_KEY and PW_TLS_CA, to set over a child's environment; none when TLS is off.
std::vector<std::pair<std::string, std::string>> tls_env(const train::TlsConfig& tls);

// The files as absolute paths (a child may run in another folder), checked as the ranks will check
// them: all three or none (ConfigError naming /tls/...), each readable PEM (InputError naming it).
train::TlsConfig checked_tls(const train::TlsConfig& tls);

}  // namespace pw::launcher
