#include "tools/tls_flags.h"

#include <cstdlib>

#include "rpc/tls.h"

namespace pw::tools {

void add_tls_options(CLI::App& cmd, train::TlsConfig& tls, FlagNames& names, const std::string& group) {
  const struct {
    const char* flag;
    const char* path;
    std::string* field;
    std::string help;
  } options[] = {
      {"--tls-cert", "/tls/cert", &tls.cert,
       "mutual TLS on every link between processes: this host's certificate, PEM, signed by the job's CA (default $" +
           std::string(rpc::kTlsCertEnv) + ")"},
      {"--tls-key", "/tls/key", &tls.key,
       "with --tls-cert: its private key, PEM, unencrypted (default $" + std::string(rpc::kTlsKeyEnv) + ")"},
      {"--tls-ca", "/tls/ca", &tls.ca,
       "with --tls-cert: the job's CA certificate, PEM; peers must have a certificate it signed (default $" +
           std::string(rpc::kTlsCaEnv) + ")"},
  };
  for (const auto& o : options) {
    names.add(o.path, o.flag);
    auto* option = cmd.add_option(o.flag, *o.field, o.help);
    if (!group.empty()) option->group(group);
  }
}

train::TlsConfig tls_with_environment(train::TlsConfig tls) {
  for (auto [field, name] : {std::pair{&tls.cert, rpc::kTlsCertEnv}, std::pair{&tls.key, rpc::kTlsKeyEnv},
                             std::pair{&tls.ca, rpc::kTlsCaEnv}})
    if (field->empty())
      if (const char* value = std::getenv(name); value != nullptr) *field = value;
  return tls;
}

}  // namespace pw::tools
