#pragma once
// --tls-cert, --tls-key and --tls-ca, as train, launch and ps serve take them: mutual TLS on every
// link between processes (rpc/tls.h). A flag not given is taken from PW_TLS_CERT, PW_TLS_KEY or
// PW_TLS_CA (as pipewright launch passes them to the processes it starts); the flag wins.
#include <CLI/CLI.hpp>

#include "pipewright/job_config.h"
#include "tools/flag_names.h"

namespace pw::tools {

// Adds the three flags, binding `tls`, and records their fields (/tls/cert, ...) in `names`.
void add_tls_options(CLI::App& cmd, train::TlsConfig& tls, FlagNames& names, const std::string& group = "");

// `tls` with the fields its flags left empty taken from the environment.
train::TlsConfig tls_with_environment(train::TlsConfig tls);

}  // namespace pw::tools
