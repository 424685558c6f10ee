#include "train/launcher/tls_env.h"

#include <filesystem>

#include "rpc/tls.h"
#include "train/job_config.h"

namespace pw::launcher {

std::vector<std::pair<std::string, std::string>> tls_env(const train::TlsConfig& tls) {
  if (!tls.enabled()) return {};
  return {{rpc::kTlsCertEnv, tls.cert}, {rpc::kTlsKeyEnv, tls.key}, {rpc::kTlsCaEnv, tls.ca}};
}

train::TlsConfig checked_tls(const train::TlsConfig& tls) {
  train::check_tls_fields(tls);
  if (!tls.enabled()) return tls;
  const auto absolute = [](const std::string& path) {
    std::error_code error;
    const auto full = std::filesystem::absolute(path, error);
    return error ? path : full.lexically_normal().string();
  };
  train::TlsConfig out{absolute(tls.cert), absolute(tls.key), absolute(tls.ca)};
  train::load_job_tls(out);   // refuses bad files before any process starts
  return out;
}

}  // namespace pw::launcher
